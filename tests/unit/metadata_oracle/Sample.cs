// Shapes the metadata reader must name and decode; compiled into the oracle assembly,
// which the tests then read back both with the oracle and with sosext.
using System;
using System.Collections.Generic;

namespace Sosext.Oracle.Sample
{
    public enum Color : byte { Red, Green = 5, Blue }

    [Flags]
    public enum Wide : long { None = 0, High = 1L << 40 }

    public struct Point
    {
        public int X;
        public int Y;
    }

    public unsafe class Primitives
    {
        public bool Bool;
        public char Char;
        public sbyte I1;
        public byte U1;
        public short I2;
        public ushort U2;
        public int I4;
        public uint U4;
        public long I8;
        public ulong U8;
        public float R4;
        public double R8;
        public nint I;
        public nuint U;
        public string Str;
        public object Obj;
        public decimal Dec;
        public int[] Array1;
        public int[,] Array2;
        public string[,,] Array3;
        public int[][] Jagged;
        public Point[,][] Mixed;
        public int* Ptr;
        public void** PtrPtr;
        public Point* PointPtr;
        public List<int> ListOfInt;
        public Dictionary<string, List<Point>> Nested;
        public KeyValuePair<int, string>[] Pairs;
        public Point? MaybePoint;
        public (int, string) Tuple;
        public volatile int Volatile;
        public delegate*<int, string, void> FnPtr;
        public delegate* unmanaged[Cdecl]<int, int> NativeFnPtr;
        public Color Colour;
        public Outer<string>.Inner InnerOfString;
        public Outer<int>.Inner.Deeper<long> DeeperInst;
        public static readonly Point Origin;
        public const int Answer = 42;
        [ThreadStatic] public static int PerThread;
    }

    public class Outer<T>
    {
        public T Value;
        public T[] Values;
        public List<T> Items;

        public class Inner
        {
            public T OuterValue;

            public class Deeper<U>
            {
                public U Own;
                public T FromOuter;
                public Dictionary<T, U> Map;
            }
        }

        public struct Pair
        {
            public T First;
            public T Second;
        }

        public U Convert<U>(T value, U other, ref int counter, out string note, in Point at, params object[] rest)
        {
            note = "converted";
            counter++;
            return other;
        }

        public List<T> Make() => new List<T>();

        public IEnumerable<T> Yield()
        {
            yield return Value;
        }
    }

    public interface IThing<in T>
    {
        void Do(T thing);
    }

    public abstract class Base
    {
        public abstract int Compute(int x);
    }

    public sealed class Derived : Base, IThing<string>, IComparable<Derived>
    {
        public override int Compute(int x) => x * 2;
        public void Do(string thing) { }
        public int CompareTo(Derived other) => 0;
    }

    public ref struct Span2
    {
        public ref int Target;
        public int Length;
    }

    public unsafe struct WithFixedBuffer
    {
        public fixed byte Buffer[16];
        public int After;
    }

    public static class Methods
    {
        public static void VarArgs(int first, __arglist) { }

        public static void CallVarArgs()
        {
            VarArgs(1, __arglist(2L, "three"));
        }

        public static unsafe int Pinned(int[] values)
        {
            fixed (int* p = values)
            {
                return *p;
            }
        }

        public static ref int RefReturn(ref int x) => ref x;

        public static T Pick<T, U>(T a, U b) where T : class => a;

        public static string Literals()
        {
            string s = "hello";
            s += "ünïcødé ✓";
            s += "";
            s += "line\nbreak\ttab";
            return s + Pick<string, int>("x", 1) + new List<Point>().Count;
        }

        public static int Lambda(int k)
        {
            Func<int, int> f = x => x + k;
            return f(1);
        }

        public static int MultiDim()
        {
            var grid = new int[2, 3];
            grid[1, 2] = 5;
            return grid[1, 2] + grid.GetLength(0);
        }
    }
}

namespace Sosext.Oracle.Sample.Deep.Er
{
    public class Leaf<A, B, C> { public A a; public B b; public C c; }
}

public class GlobalNamespaceType
{
    public class NestedInGlobal { }
}
