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

namespace SosextDebuggee
{
    /// <summary>The `leakheap` scenario's cache: sessions by id and in LRU order; never evicts.</summary>
    public sealed class LeakCache
    {
        public readonly System.Collections.Generic.Dictionary<long, LeakSession> ById = new();
        public readonly System.Collections.Generic.LinkedList<LeakSession> Lru = new();
    }

    /// <summary>A cached session of the `leakheap` scenario.</summary>
    public sealed class LeakSession
    {
        public long Id;
        public string Name;
        public byte[] Buffer;
        public System.Collections.Generic.List<LeakItem> Items;
        public System.Collections.Generic.LinkedListNode<LeakSession> Node;
        public LeakCache Owner;
    }

    /// <summary>An item of a <see cref="LeakSession"/>, pointing back to it.</summary>
    public sealed class LeakItem
    {
        public LeakSession Session;
        public string Label;
        public long Value;
    }
}
