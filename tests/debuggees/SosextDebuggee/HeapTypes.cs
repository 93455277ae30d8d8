using System;
using System.Threading;

// Types of the `heap` scenario. Each one is unique to this program, so that every instance of it on the
// heap is one the scenario made and lists in its truth. Field layouts differ on purpose.
namespace SosextDebuggee
{
    /// <summary>No fields.</summary>
    public sealed class HeapItemA { }

    /// <summary>Int fields only.</summary>
    public sealed class HeapItemB
    {
        public int X, Y, Z;
    }

    /// <summary>Reference fields only.</summary>
    public sealed class HeapItemC
    {
        public string Name;
        public HeapItemA Next;
        public object Other;
    }

    /// <summary>References mixed with primitives of several sizes.</summary>
    public sealed class HeapItemD
    {
        public long Id;
        public HeapItemB B;
        public double Weight;
        public byte Flag;
        public string Label;
    }

    /// <summary>One field of each kind, with known values, for dumpobj.</summary>
    public sealed class HeapItemE
    {
        public bool Flag = true;
        public byte Byte = 0xAB;
        public char Char = 'Z';
        public short Short = -1234;
        public int Int = 0x12345678;
        public long Long = -0x123456789AL;
        public float Float = 1.5f;
        public double Double = 3.25;
        public nint NativeInt = 0x7777;
        public DayOfWeek Enum = DayOfWeek.Friday;
        public UniqueStruct Inline = new UniqueStruct { A = 11, B = 22, C = 33 };
        public string Str;
        public object Obj;
    }

    /// <summary>Dictionary key; IEquatable so its default comparer is GenericEqualityComparer&lt;UniqueKey&gt;.</summary>
    public sealed class UniqueKey : IEquatable<UniqueKey>
    {
        public int Id;
        public UniqueKey(int id) { Id = id; }
        public bool Equals(UniqueKey other) => other != null && other.Id == Id;
        public override bool Equals(object obj) => obj is UniqueKey k && Equals(k);
        public override int GetHashCode() => Id;
    }

    /// <summary>A struct without references (blittable: may live in pinned arrays).</summary>
    public struct UniqueStruct
    {
        public int A;
        public int B;
        public long C;
    }

    /// <summary>A struct with a reference field.</summary>
    public struct RefStruct
    {
        public HeapItemA Ref;
        public int Value;
    }

    /// <summary>Element type of an empty array; never instantiated itself.</summary>
    public sealed class EmptyElem { }

    public sealed class GenericHolder<T>
    {
        public T Value;
    }

    public sealed class FinalizableItem
    {
        public static int Finalized;
        public int Id;
        public FinalizableItem(int id) { Id = id; }
        ~FinalizableItem() { Interlocked.Increment(ref Finalized); }
    }

    public sealed class Gen2Item { public int Id; public Gen2Item(int id) { Id = id; } }
    public sealed class Gen1Item { public int Id; public Gen1Item(int id) { Id = id; } }
    public sealed class Gen0Item { public int Id; public Gen0Item(int id) { Id = id; } }

    /// <summary>Allocated after the last GC and dropped: dead, but still on the heap.</summary>
    public sealed class GarbageItem
    {
        public int Id;
        public long Payload;
        public GarbageItem(int id) { Id = id; Payload = 0x5050505050L + id; }
    }

    /// <summary>Held by a worker thread's local and by the static root.</summary>
    public sealed class StackHeldItem { public int Worker; public StackHeldItem(int w) { Worker = w; } }

    /// <summary>Held only by a worker thread's local.</summary>
    public sealed class StackOnlyItem { public int Worker; public StackOnlyItem(int w) { Worker = w; } }

    /// <summary>A single root chain: static root array -> ChainHead -> ChainLink -> ChainLink -> ChainTail.</summary>
    public sealed class ChainHead { public ChainLink First; }
    public sealed class ChainLink { public object Next; public int Index; }
    public sealed class ChainTail { public string Marker; }
}
