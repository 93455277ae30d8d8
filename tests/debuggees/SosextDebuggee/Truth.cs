using System;
using System.Collections.Generic;
using System.IO;
using System.Runtime;
using System.Runtime.InteropServices;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>Collection counts of gen 0/1/2; if they differ before and after printing, objects may have moved.</summary>
    internal readonly record struct GcCounts(int Gen0, int Gen1, int Gen2, long LastIndex)
    {
        public static GcCounts Now() =>
            new GcCounts(GC.CollectionCount(0), GC.CollectionCount(1), GC.CollectionCount(2), GC.GetGCMemoryInfo(GCKind.Any).Index);
    }

    /// <summary>Per-type ground truth: MethodTable, instance count, total size, and (optionally) every address.</summary>
    internal sealed class TypeTable
    {
        private sealed class Entry
        {
            public Type Type;
            public long Count, Size, UnalignedSize, DeadCount, DeadSize, DeadUnalignedSize;
            public readonly List<nint> Addresses = new List<nint>();
            public readonly List<int> Generations = new List<int>();
            public readonly List<long> Sizes = new List<long>();  // unaligned, parallel to Addresses
            public readonly List<nint> DeadAddresses = new List<nint>();
            public readonly SortedDictionary<int, long> Gens = new SortedDictionary<int, long>();
        }

        private readonly List<Entry> _entries = new List<Entry>();
        private readonly Dictionary<Type, Entry> _byType = new Dictionary<Type, Entry>();
        // Reference identity: the same object reached through two containers counts once.
        private readonly HashSet<object> _seen;
        private readonly bool _addresses;

        public TypeTable(bool trackAddresses, bool dedupe)
        {
            _addresses = trackAddresses;
            _seen = dedupe ? new HashSet<object>(ReferenceEqualityComparer.Instance) : null;
        }

        private Entry Get(Type t)
        {
            if (!_byType.TryGetValue(t, out Entry e))
            {
                e = new Entry { Type = t };
                _byType.Add(t, e);
                _entries.Add(e);
            }
            return e;
        }

        /// <summary>Lists a type even if it ends up with no instances (negative cases for the tests).</summary>
        public void Declare(Type t) => Get(t);

        /// <summary>Counts a live object of a test type (its runtime type decides the entry).</summary>
        public void AddLive(object o)
        {
            if (o == null || (_seen != null && !_seen.Add(o))) return;
            Entry e = Get(o.GetType());
            Mem.CheckedMethodTable(o);
            long size = Mem.SizeOf(o);
            int gen = GC.GetGeneration(o);
            e.Count++;
            e.Size += size;
            e.UnalignedSize += Mem.UnalignedSizeOf(o);
            e.Gens[gen] = e.Gens.GetValueOrDefault(gen) + 1;
            if (_addresses)
            {
                e.Addresses.Add(Mem.Addr(o));
                e.Generations.Add(gen);
                e.Sizes.Add(Mem.UnalignedSizeOf(o));
            }
        }

        /// <summary>Counts a live object known only by address (objects referenced only from another thread's stack).
        /// Only for fixed-size classes, whose aligned and unaligned sizes agree.</summary>
        public void AddLiveRaw(Type t, nint address, long size, int gen)
        {
            CheckFixedSize(t);
            Entry e = Get(t);
            e.Count++;
            e.Size += size;
            e.UnalignedSize += size;
            e.Gens[gen] = e.Gens.GetValueOrDefault(gen) + 1;
            if (_addresses)
            {
                e.Addresses.Add(address);
                e.Generations.Add(gen);
                e.Sizes.Add(size);
            }
        }

        /// <summary>Counts an unreachable object that is still on the heap (allocated after the last GC).</summary>
        public void AddDead(Type t, nint address, long size)
        {
            CheckFixedSize(t);
            Entry e = Get(t);
            e.DeadCount++;
            e.DeadSize += size;
            e.DeadUnalignedSize += size;
            if (_addresses) e.DeadAddresses.Add(address);
        }

        private static void CheckFixedSize(Type t)
        {
            if (Mem.MtComponentSize(t.TypeHandle.Value) != 0)
                throw new ArgumentException($"{t} has a component size; pass the object instead");
        }

        public void WriteTotals(Json w)
        {
            long count = 0, size = 0, unaligned = 0;
            foreach (Entry e in _entries) { count += e.Count; size += e.Size; unaligned += e.UnalignedSize; }
            w.BeginObject().Prop("count", count).Prop("size", size).Prop("unalignedSize", unaligned).EndObject();
        }

        /// <summary>Writes {"&lt;Type.ToString()&gt;": {...}, ...}.</summary>
        public void Write(Json w)
        {
            w.BeginObject();
            foreach (Entry e in _entries)
            {
                nint mt = e.Type.TypeHandle.Value;
                w.Name(e.Type.ToString()).BeginObject();
                w.PropHex("mt", mt);
                w.Prop("name", e.Type.ToString());
                w.Prop("fullName", e.Type.FullName);
                w.Prop("mtFlags", Mem.Hex((nint)Mem.MtFlags(mt)));
                w.Prop("baseSize", Mem.MtBaseSize(mt));
                w.Prop("componentSize", Mem.MtComponentSize(mt));
                w.Prop("count", e.Count);
                w.Prop("size", e.Size);
                w.Prop("unalignedSize", e.UnalignedSize);
                w.Name("gens").BeginObject();
                foreach (KeyValuePair<int, long> kv in e.Gens) w.Prop(kv.Key.ToString(), kv.Value);
                w.EndObject();
                w.Prop("deadCount", e.DeadCount);
                w.Prop("deadSize", e.DeadSize);
                w.Prop("deadUnalignedSize", e.DeadUnalignedSize);
                if (_addresses)
                {
                    w.Name("addresses").BeginArray();
                    foreach (nint a in e.Addresses) w.Hex(a);
                    w.EndArray();
                    w.Name("generations").BeginArray();
                    foreach (int g in e.Generations) w.Value(g);
                    w.EndArray();
                    w.Name("sizes").BeginArray();
                    foreach (long sz in e.Sizes) w.Value(sz);
                    w.EndArray();
                    w.Name("deadAddresses").BeginArray();
                    foreach (nint a in e.DeadAddresses) w.Hex(a);
                    w.EndArray();
                }
                w.EndObject();
            }
            w.EndObject();
        }
    }

    internal static class Truth
    {
        /// <summary>Writes the description of one chosen object; strings add value and length, arrays their shape.</summary>
        public static void WriteObject(Json w, object o)
        {
            w.BeginObject();
            Type t = o.GetType();
            w.PropHex("address", Mem.Addr(o));
            w.PropHex("mt", Mem.CheckedMethodTable(o));
            w.Prop("type", t.ToString());
            w.Prop("fullName", t.FullName);
            w.Prop("size", Mem.SizeOf(o));
            w.Prop("unalignedSize", Mem.UnalignedSizeOf(o));
            w.Prop("generation", GC.GetGeneration(o));
            if (o is string s)
            {
                w.Prop("length", s.Length);
                w.Prop("value", s);
            }
            else if (o is Array a)
            {
                w.Prop("length", a.LongLength);
                w.Prop("rank", a.Rank);
                w.Name("dims").BeginArray();
                for (int d = 0; d < a.Rank; d++) w.Value(a.GetLength(d));
                w.EndArray();
                w.Prop("elementType", t.GetElementType().ToString());
                w.Prop("rawLength", Mem.RawLength(o));
            }
            w.EndObject();
        }

        /// <summary>A raw address (an object we must not hold, e.g. dead or on another thread's stack).</summary>
        public static void WriteRawObject(Json w, Type t, nint address, long size, int generation)
        {
            w.BeginObject();
            w.PropHex("address", address);
            w.PropHex("mt", t.TypeHandle.Value);
            w.Prop("type", t.ToString());
            w.Prop("fullName", t.FullName);
            w.Prop("size", size);
            w.Prop("unalignedSize", size);
            w.Prop("generation", generation);
            w.EndObject();
        }

        /// <summary>Facts about the runtime and GC configuration the truth was gathered under.</summary>
        public static void WriteRuntime(Json w, GcCounts counts)
        {
            w.Name("runtime").BeginObject();
            w.Prop("version", Environment.Version.ToString());
            w.Prop("frameworkDescription", RuntimeInformation.FrameworkDescription);
            w.Prop("runtimeDir", Path.GetDirectoryName(typeof(object).Assembly.Location));
            w.Prop("pid", Environment.ProcessId);
            w.Prop("mainOsTid", Mem.CurrentOsTid());
            w.Prop("processorCount", Environment.ProcessorCount);
            w.Prop("pointerSize", IntPtr.Size);
            w.Prop("serverGC", GCSettings.IsServerGC);
            w.Prop("latencyMode", GCSettings.LatencyMode.ToString());
            w.Name("env").BeginObject();
            foreach (string name in new[] { "DOTNET_gcServer", "DOTNET_GCName", "DOTNET_GCgen0size", "DOTNET_GCHeapCount", "DOTNET_GCDynamicAdaptationMode" })
                w.Prop(name, Environment.GetEnvironmentVariable(name));
            w.EndObject();
            w.Name("gcCounts").BeginArray().Value(counts.Gen0).Value(counts.Gen1).Value(counts.Gen2).EndArray();
            w.Prop("lastGCIndex", counts.LastIndex);
            // Keys as the runtime names them (ServerGC, HeapCount, RegionSize, ...), sorted for stable output.
            w.Name("gcConfig").BeginObject();
            var config = new List<KeyValuePair<string, object>>(GC.GetConfigurationVariables());
            config.Sort((a, b) => string.CompareOrdinal(a.Key, b.Key));
            foreach (KeyValuePair<string, object> kv in config) w.Name(kv.Key).Any(kv.Value);
            w.EndObject();
            GCMemoryInfo info = GC.GetGCMemoryInfo();
            w.Name("lastGC").BeginObject();
            w.Prop("index", info.Index);
            w.Prop("generation", info.Generation);
            w.Prop("compacted", info.Compacted);
            w.Prop("concurrent", info.Concurrent);
            w.Prop("heapSizeBytes", info.HeapSizeBytes);
            w.Prop("totalCommittedBytes", info.TotalCommittedBytes);
            w.Prop("fragmentedBytes", info.FragmentedBytes);
            w.Prop("pinnedObjectsCount", info.PinnedObjectsCount);
            // Index 0..4 = gen0, gen1, gen2, LOH, POH.
            w.Name("generationInfo").BeginArray();
            foreach (GCGenerationInfo g in info.GenerationInfo)
            {
                w.BeginObject();
                w.Prop("sizeBeforeBytes", g.SizeBeforeBytes);
                w.Prop("sizeAfterBytes", g.SizeAfterBytes);
                w.Prop("fragmentationBeforeBytes", g.FragmentationBeforeBytes);
                w.Prop("fragmentationAfterBytes", g.FragmentationAfterBytes);
                w.EndObject();
            }
            w.EndArray();
            w.EndObject();
            w.Prop("totalAllocatedBytes", GC.GetTotalAllocatedBytes(false));
            w.EndObject();
        }
    }
}

namespace DebuggeeHost
{
    /// <summary>
    /// Cross-checks <see cref="Mem.SizeOf"/> (BaseSize + ComponentSize * length from the MethodTable)
    /// against what the allocator charged: GC.GetAllocatedBytesForCurrentThread() is exact per object.
    /// Runs once at startup; the objects it makes are garbage collected by the first settle.
    /// </summary>
    internal static class SizeChecks
    {
        private static readonly System.Collections.Generic.List<(string What, long MtSize, long Allocated)> s_results =
            new System.Collections.Generic.List<(string, long, long)>();

        private static void Check(string what, Func<object> make)
        {
            make(); // JIT and first-call work outside the measured window
            long before = GC.GetAllocatedBytesForCurrentThread();
            object o = make();
            long allocated = GC.GetAllocatedBytesForCurrentThread() - before;
            s_results.Add((what, Mem.SizeOf(o), allocated));
            GC.KeepAlive(o);
        }

        public static void Run()
        {
            for (int n = 1; n <= 5; n++)
            {
                int len = n;
                Check("string length " + len, () => new string('s', len));
            }
            Check("string length 24", () => new string('s', 24));
            Check("string length 50000", () => new string('s', 50_000));
            Check("object", () => new object());
            Check("HeapItemE", () => new HeapItemE());
            Check("boxed UniqueStruct", () => (object)new UniqueStruct());
            Check("byte[0]", () => new byte[0]);
            Check("byte[13]", () => new byte[13]);
            Check("byte[100000]", () => new byte[100_000]);
            Check("UniqueStruct[3]", () => new UniqueStruct[3]);
            Check("UniqueStruct[4,5]", () => new UniqueStruct[4, 5]);
            Check("int[2,3,4]", () => new int[2, 3, 4]);
            Check("int[1,1,1]", () => new int[1, 1, 1]);
        }

        public static void Write(Json w)
        {
            nint stringMt = typeof(string).TypeHandle.Value;
            w.Name("stringMethodTable").BeginObject()
             .PropHex("mt", stringMt)
             .Prop("baseSize", Mem.MtBaseSize(stringMt))
             .Prop("componentSize", Mem.MtComponentSize(stringMt))
             .EndObject();
            w.Name("sizeChecks").BeginArray();
            foreach ((string what, long mtSize, long allocated) in s_results)
                w.BeginObject().Prop("what", what).Prop("mtSize", mtSize).Prop("allocatedBytes", allocated).EndObject();
            w.EndArray();
        }
    }
}
