using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Text;

using SosextDebuggee;

// The names SOS's ConcurrentDictionaries script looks for (DotnetDumpCommands.Program+DumpSampleStruct),
// so tests/test_sos_scripts_gc.py can play its regular expressions unchanged.
namespace DotnetDumpCommands
{
    internal static class Program
    {
        public struct DumpSampleStruct
        {
            public int IntValue;
            public string StringValue;
            public DateTime Date;
        }

        public sealed class DumpSampleClass
        {
            public int Value1 { get; set; }
            public string Value2 { get; set; }
        }
    }
}

namespace DebuggeeHost
{
    using Sample = DotnetDumpCommands.Program;

    /// <summary>A generic type with a nested generic type, for nested-name shapes.</summary>
    internal sealed class DcdOuter<T>
    {
        public sealed class Inner<U>
        {
            public T First;
            public U Second;
        }

        public sealed class Plain { public T Value; }
    }

    /// <summary>
    /// The five ConcurrentDictionaries of SOS's ConcurrentDictionaries.script (int→string[],
    /// int→int, string→bool, struct→class, int→struct, with the script's keys and values), and
    /// objects of generic shapes whose names the runtime and ClrMD write differently: nested
    /// generics, arrays and jagged arrays of instantiations, a multi-dimensional one, a
    /// ValueTuple with a TRest, a closure class of a generic method. The truth names each type
    /// in C#'s shape, composed here from reflection (Type.GetGenericArguments), independently
    /// of sosext.
    /// </summary>
    internal sealed class DcdScriptScenario : IScenario
    {
        private static ConcurrentDictionary<int, string[]> s_arrays;
        private static ConcurrentDictionary<int, int> s_ints;
        private static ConcurrentDictionary<string, bool> s_strings;
        private static ConcurrentDictionary<Sample.DumpSampleStruct, Sample.DumpSampleClass> s_structKeys;
        private static ConcurrentDictionary<int, Sample.DumpSampleStruct> s_structValues;
        private static object[] s_shapes;

        public void Build(string[] args)
        {
            s_arrays = new ConcurrentDictionary<int, string[]>();
            s_arrays[1] = new[] { "a", "b", "c", "d" };
            s_arrays[2] = new[] { "e" };
            s_ints = new ConcurrentDictionary<int, int>();
            s_ints[0] = 1;
            s_ints[31] = 17;
            s_ints[1521482] = 512487;
            s_strings = new ConcurrentDictionary<string, bool>();
            s_strings["String true"] = true;
            s_strings["String false"] = false;
            s_strings[new string('S', 150)] = false;
            s_structKeys = new ConcurrentDictionary<Sample.DumpSampleStruct, Sample.DumpSampleClass>();
            s_structKeys[new Sample.DumpSampleStruct { IntValue = 1, StringValue = "one" }] = null;
            s_structKeys[new Sample.DumpSampleStruct { IntValue = 2, StringValue = "two" }] = new Sample.DumpSampleClass();
            s_structValues = new ConcurrentDictionary<int, Sample.DumpSampleStruct>();
            s_structValues[0] = new Sample.DumpSampleStruct { IntValue = 12, StringValue = "twelve", Date = new DateTime(2020, 2, 2) };

            s_shapes = new object[]
            {
                new DcdOuter<int>.Inner<string>(),
                new DcdOuter<string[]>.Plain(),
                new List<int>[2],
                new List<int>[2][],
                new KeyValuePair<int, string>[2, 2],
                new Dictionary<string, List<int>[]> { ["x"] = new List<int>[1] },
                new ValueTuple<int, int, int, int, int, int, int, ValueTuple<string>>[1],
                new Func<int, Sample.DumpSampleStruct>(_ => default),
                Closure<long>(3),
            };
        }

        private static Func<T> Closure<T>(T value) => () => value;

        public void Settle(int attempt) { }

        public void WriteTruth(Json w)
        {
            w.Name("dcdscript").BeginObject();
            Dictionary(w, "arrays", s_arrays);
            Dictionary(w, "ints", s_ints);
            Dictionary(w, "strings", s_strings);
            Dictionary(w, "structKeys", s_structKeys);
            Dictionary(w, "structValues", s_structValues);
            w.PropHex("arrayOne", Mem.Addr(s_arrays[1]));
            w.Name("shapes").BeginArray();
            foreach (object o in s_shapes)
            {
                w.BeginObject();
                w.PropHex("mt", Mem.MethodTableOf(o));
                w.Prop("name", CSharpName(o.GetType()));
                w.EndObject();
            }
            w.EndArray();
            w.EndObject();
        }

        private static void Dictionary(Json w, string key, object d)
        {
            w.Name(key).BeginObject();
            w.PropHex("address", Mem.Addr(d));
            w.PropHex("mt", Mem.MethodTableOf(d));
            w.Prop("name", CSharpName(d.GetType()));
            w.EndObject();
        }

        /// <summary>C#'s shape of a type's name: Namespace.Outer&lt;A&gt;+Inner&lt;B&gt;, arguments in
        /// order of the enclosing types, array ranks after the element.</summary>
        private static string CSharpName(Type t)
        {
            if (t.IsArray)
                return CSharpName(t.GetElementType()) + "[" + new string(',', t.GetArrayRank() - 1) + "]";
            if (!t.IsGenericType)
                return t.FullName;
            Type[] args = t.GetGenericArguments();
            var chain = new List<Type>();
            for (Type c = t; c != null; c = c.IsNested ? c.DeclaringType : null)
                chain.Insert(0, c);
            var sb = new StringBuilder(chain[0].Namespace).Append('.');
            int used = 0;
            foreach (Type c in chain)
            {
                if (c != chain[0])
                    sb.Append('+');
                string name = c.Name;
                int tick = name.IndexOf('`');
                int arity = tick < 0 ? 0 : int.Parse(name[(tick + 1)..]);
                sb.Append(tick < 0 ? name : name[..tick]);
                if (arity > 0)
                {
                    sb.Append('<').Append(string.Join(", ", args.Skip(used).Take(arity).Select(CSharpName))).Append('>');
                    used += arity;
                }
            }
            return sb.ToString();
        }

        public bool OnCommand(string command) => false;
    }
}
