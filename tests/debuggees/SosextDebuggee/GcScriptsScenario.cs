using System;
using System.Collections.Concurrent;
using System.IO;
using System.Reflection;
using System.Reflection.Emit;
using System.Runtime.CompilerServices;
using System.Threading;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>An object whose generation the tests ask about: a string field and a static ulong.</summary>
    internal sealed class GcScriptsWhere
    {
        public const ulong StaticValue = 0xBEEF_0000_5050UL;
        public static ulong Shared = StaticValue;
        public string Label;
        public GcScriptsWhere(string label) { Label = label; }
    }

    /// <summary>A struct used as a ConcurrentDictionary key and value.</summary>
    internal struct GcScriptsKey
    {
        public int Number;
        public string Text;
        public DateTime When;
    }

    /// <summary>A class value whose auto-properties are left at their defaults.</summary>
    internal sealed class GcScriptsValue
    {
        public int Count { get; set; }
        public string Note { get; set; }
    }

    /// <summary>
    /// `gcscripts`: the situations SOS's GCTests, GCPOH, DynamicMethod, ConcurrentDictionaries and
    /// OtherCommands scripts look at, built our own way. The thread "sosext-gcwhere" runs
    /// <see cref="Body"/>, which makes a DynamicMethod (IL: ldarg.0, ldc.i4.0, add, ret), a
    /// StringWriter and a pinned byte[100] (on the pinned object heap), then allocates a
    /// GcScriptsWhere and collects twice (it ends in gen2), a second and collects gen0 (gen1), a
    /// third (gen0), all held in its own locals, then blocks in <see cref="Park"/>. Dictionaries: &lt;string, bool&gt; with a
    /// key longer than SOS shows, &lt;GcScriptsKey, GcScriptsValue&gt; (struct keys; a null and a
    /// default-valued class value) and &lt;int, GcScriptsKey&gt; (a struct value).
    /// Settle runs no GC: the generations stay as the thread left them.
    /// </summary>
    internal sealed class GcScriptsScenario : IScenario
    {
        public const int PinnedLength = 100;
        public static readonly string LongKey = new string('L', 140);

        private static readonly ManualResetEventSlim s_never = new ManualResetEventSlim(false, 0);
        private static readonly ManualResetEventSlim s_parked = new ManualResetEventSlim(false, 0);
        private static GcScriptsWhere s_gen0, s_gen1, s_gen2;
        private static StringWriter s_writer;
        private static byte[] s_pinned;
        private static DynamicMethod s_dynamic;
        private static int s_tid;
        private static ConcurrentDictionary<string, bool> s_strings;
        private static ConcurrentDictionary<GcScriptsKey, GcScriptsValue> s_structKeys;
        private static ConcurrentDictionary<int, GcScriptsKey> s_structValues;

        public void Build(string[] args)
        {
            s_strings = new ConcurrentDictionary<string, bool>();
            s_strings["short true"] = true;
            s_strings[LongKey] = false;
            s_structKeys = new ConcurrentDictionary<GcScriptsKey, GcScriptsValue>();
            s_structKeys[new GcScriptsKey { Number = 1, Text = "one" }] = null;
            s_structKeys[new GcScriptsKey { Number = 2, Text = "two" }] = new GcScriptsValue();
            s_structValues = new ConcurrentDictionary<int, GcScriptsKey>();
            s_structValues[0] = new GcScriptsKey { Number = 12, Text = "twelve", When = new DateTime(2020, 2, 2) };

            var t = new Thread(Body) { Name = "sosext-gcwhere", IsBackground = true };
            t.Start();
            if (!s_parked.Wait(30_000)) throw new TimeoutException("the gcwhere thread did not park");
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void Body()
        {
            // The allocations that may trigger a GC come first, then the three generations.
            DynamicMethod dynamicMethod = MakeDynamic();
            StringWriter writer = new StringWriter();
            writer.Write("sosext");
            byte[] pinned = GC.AllocateArray<byte>(PinnedLength, pinned: true);
            GcScriptsWhere old = new GcScriptsWhere("gen2");
            GC.Collect();
            GC.Collect();
            GcScriptsWhere middle = new GcScriptsWhere("gen1");
            GC.Collect(0);
            GcScriptsWhere young = new GcScriptsWhere("gen0");
            Park(young, middle, old, writer, pinned, dynamicMethod);
            GC.KeepAlive(young);
            GC.KeepAlive(middle);
            GC.KeepAlive(old);
            GC.KeepAlive(writer);
            GC.KeepAlive(pinned);
            GC.KeepAlive(dynamicMethod);
        }

        private static DynamicMethod MakeDynamic()
        {
            var dm = new DynamicMethod("GcScriptsAddZero", typeof(int), new[] { typeof(int) }, typeof(GcScriptsScenario).Module);
            ILGenerator il = dm.GetILGenerator();
            il.Emit(OpCodes.Ldarg_0);
            il.Emit(OpCodes.Ldc_I4_0);
            il.Emit(OpCodes.Add);
            il.Emit(OpCodes.Ret);
            var f = (Func<int, int>)dm.CreateDelegate(typeof(Func<int, int>));
            if (f(5) != 5) throw new InvalidOperationException("the dynamic method misbehaves");
            return dm;
        }

        /// The MethodDesc the runtime made for a DynamicMethod, which no public API gives:
        /// DynamicMethod._methodHandle (a RuntimeMethodInfoStub) holds it in m_value.m_handle.
        private static IntPtr DynamicMethodDesc(DynamicMethod dm)
        {
            const BindingFlags Instance = BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Instance;
            object stub = typeof(DynamicMethod).GetField("_methodHandle", Instance)?.GetValue(dm)
                ?? throw new InvalidOperationException("DynamicMethod._methodHandle is gone");
            object handle = stub.GetType().GetField("m_value", Instance)?.GetValue(stub)
                ?? throw new InvalidOperationException("RuntimeMethodInfoStub.m_value is gone");
            return (IntPtr)(handle.GetType().GetField("m_handle", Instance)?.GetValue(handle)
                ?? throw new InvalidOperationException("RuntimeMethodHandleInternal.m_handle is gone"));
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void Park(GcScriptsWhere young, GcScriptsWhere middle, GcScriptsWhere old, StringWriter writer,
                                 byte[] pinned, DynamicMethod dynamicMethod)
        {
            s_gen0 = young;
            s_gen1 = middle;
            s_gen2 = old;
            s_writer = writer;
            s_pinned = pinned;
            s_dynamic = dynamicMethod;
            s_tid = Mem.CurrentOsTid();
            s_parked.Set();
            s_never.Wait();
        }

        public void Settle(int attempt) { }

        public void WriteTruth(Json w)
        {
            w.Name("gcscripts").BeginObject();
            w.Prop("osTid", s_tid);
            w.Prop("bodyMethod", typeof(GcScriptsScenario).FullName + "." + nameof(Body));
            w.Prop("parkMethod", typeof(GcScriptsScenario).FullName + "." + nameof(Park));
            w.PropHex("parkMethodDesc", typeof(GcScriptsScenario).GetMethod(nameof(Park), BindingFlags.NonPublic | BindingFlags.Static).MethodHandle.Value);
            w.PropHex("scenarioMt", typeof(GcScriptsScenario).TypeHandle.Value);
            w.Prop("scenarioType", typeof(GcScriptsScenario).FullName);
            w.Prop("whereType", typeof(GcScriptsWhere).FullName);
            w.PropHex("whereMt", typeof(GcScriptsWhere).TypeHandle.Value);
            w.Prop("staticValue", (long)GcScriptsWhere.Shared);
            w.Name("where").BeginArray();
            foreach (GcScriptsWhere o in new[] { s_gen0, s_gen1, s_gen2 })
            {
                w.BeginObject();
                w.PropHex("address", Mem.Addr(o));
                w.Prop("generation", GC.GetGeneration(o));
                w.PropHex("label", Mem.Addr(o.Label));
                w.EndObject();
            }
            w.EndArray();
            w.Name("writer");
            Truth.WriteObject(w, s_writer);
            w.Name("pinned");
            Truth.WriteObject(w, s_pinned);
            w.Prop("pinnedLength", s_pinned.Length);
            w.Name("dynamic").BeginObject();
            w.PropHex("address", Mem.Addr(s_dynamic));
            w.PropHex("methodDesc", DynamicMethodDesc(s_dynamic));
            w.Name("il").BeginArray();
            foreach (string op in new[] { "ldarg.0", "ldc.i4.0", "add", "ret" }) w.Value(op);
            w.EndArray();
            w.EndObject();

            w.Name("dictionaries").BeginObject();
            w.Name("strings").BeginObject();
            w.PropHex("address", Mem.Addr(s_strings));
            w.PropHex("mt", Mem.MethodTableOf(s_strings));
            w.Prop("type", s_strings.GetType().ToString());
            w.Prop("longKey", LongKey);
            w.EndObject();
            w.Name("structKeys").BeginObject();
            w.PropHex("address", Mem.Addr(s_structKeys));
            w.PropHex("mt", Mem.MethodTableOf(s_structKeys));
            w.Prop("type", s_structKeys.GetType().ToString());
            w.PropHex("keyMt", typeof(GcScriptsKey).TypeHandle.Value);
            w.PropHex("valueMt", typeof(GcScriptsValue).TypeHandle.Value);
            w.Prop("valueType", typeof(GcScriptsValue).FullName);
            w.Name("values").BeginArray();
            foreach (var kv in s_structKeys)
            {
                if (kv.Value == null) w.Null(); else w.Hex(Mem.Addr(kv.Value));
            }
            w.EndArray();
            w.EndObject();
            w.Name("structValues").BeginObject();
            w.PropHex("address", Mem.Addr(s_structValues));
            w.PropHex("mt", Mem.MethodTableOf(s_structValues));
            w.Prop("type", s_structValues.GetType().ToString());
            w.PropHex("valueMt", typeof(GcScriptsKey).TypeHandle.Value);
            w.Prop("valueType", typeof(GcScriptsKey).FullName);
            w.Prop("number", s_structValues[0].Number);
            w.PropHex("text", Mem.Addr(s_structValues[0].Text));
            w.EndObject();
            w.EndObject();
            w.EndObject();
        }

        public bool OnCommand(string command) => false;
    }
}
