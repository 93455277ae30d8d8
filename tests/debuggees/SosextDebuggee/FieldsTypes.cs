using System;
using System.Collections.Generic;
using System.Runtime.CompilerServices;

// Types of the `fields` scenario (dumpobj, dumpmt, name2ee and their family). Each holds values the
// scenario sets and prints in its truth; names are unique to this program so name2ee finds one match.
namespace SosextDebuggee
{
    public enum FieldColor { Red = 1, Green = 2, Blue = 42 }

    public enum FieldSmall : byte { Low = 1, High = 200 }

    [Flags]
    public enum FieldPerms { None = 0, Read = 1, Write = 2, Exec = 4 }

    /// <summary>A struct holding a reference.</summary>
    public struct FieldLeaf
    {
        public int Number;
        public string Label;
    }

    /// <summary>A struct embedding a struct that holds a reference.</summary>
    public struct FieldPair
    {
        public long Id;
        public FieldLeaf Leaf;
        public double Weight;
    }

    /// <summary>One instance field of every kind, plus statics (set by the scenario).</summary>
    public sealed unsafe class FieldsHolder
    {
        public sbyte SByteField;
        public byte ByteField;
        public short ShortField;
        public ushort UShortField;
        public int IntField;
        public uint UIntField;
        public long LongField;
        public ulong ULongField;
        public nint NIntField;
        public nuint NUIntField;
        public bool BoolField;
        public char CharField;
        public float FloatField;
        public double DoubleField;
        public decimal DecimalField;
        public FieldColor ColorField;
        public FieldSmall SmallField;
        public FieldPerms PermsField;
        public int* PointerField;
        public string StringField;
        public object ObjectField;
        public object NullField;
        public int[] IntArrayField;
        public FieldPair PairField;
        public DateTime DateField;
        public Guid GuidField;
        public TimeSpan SpanField;
        public List<string> ListField;

        public static int s_counter;
        public static string s_name;
        public static FieldPair s_pair;
        [ThreadStatic] public static int t_perThread;

        /// <summary>Called before SOSEXT-READY: JIT-compiled.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public int RanMethod(int x) => IntField + x;

        /// <summary>Never called: its MethodDesc exists, its code does not.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public int NeverRanMethod(int x) => IntField - x;
    }

    /// <summary>Statics of a type whose class constructor never runs: only a boxed default is made.</summary>
    public struct ColdStatics
    {
        public static int s_cold;
        public int Value;
        static ColdStatics() { s_cold = 42; }
    }

    public sealed class GenericStatics<T>
    {
        public static T s_shared;
        public T Value;
    }

    public sealed class FieldsOuter
    {
        public int OuterValue;

        public sealed class Inner
        {
            public int InnerValue;
            public string InnerName;
        }
    }
}
