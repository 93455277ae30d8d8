// Types of the `bigheap` scenario, unique to this program.
namespace SosextDebuggee
{
    /// <summary>A node of 1,000-long singly linked chains: one reference and an int.</summary>
    public sealed class BigNode
    {
        public BigNode Next;
        public int Value;
    }

    /// <summary>A reference-free leaf.</summary>
    public sealed class BigLeaf
    {
        public long A;
        public int B;
    }

    /// <summary>Made only by the bigheap scenario's `alloc N` command, after the truth was printed.</summary>
    public sealed class AllocItem
    {
        public long Serial;
    }
}
