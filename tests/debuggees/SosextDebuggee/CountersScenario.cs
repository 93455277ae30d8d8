using System;
using System.Collections.Generic;
using System.Threading;
using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `counters`: a heap that grows at a known pace, for `sosext counters` and `sosext gcdump`.
    /// Commands: `grow N` keeps N more CounterBlock objects (1 KiB byte[] each) alive and allocates
    /// as much garbage; `gc` runs a blocking compacting full GC, then prints `SOSEXT-COUNTERS {json}`
    /// with what the runtime says about itself (GC.GetGCMemoryInfo, GC.CollectionCount,
    /// GC.GetTotalAllocatedBytes) and stays idle, so counters read afterwards must equal it.
    /// </summary>
    internal sealed class CountersScenario : IScenario
    {
        private static readonly List<CounterBlock> s_kept = new List<CounterBlock>();

        public void Build(string[] args) => Grow(1000);

        public void Settle(int attempt) => GC.Collect(2, GCCollectionMode.Forced, blocking: true, compacting: true);

        public void WriteTruth(Json w)
        {
            w.Name("counters").BeginObject();
            w.Prop("kept", s_kept.Count);
            w.PropHex("blockMt", typeof(CounterBlock).TypeHandle.Value);
            w.EndObject();
        }

        private static void Grow(int n)
        {
            for (int i = 0; i < n; i++)
            {
                s_kept.Add(new CounterBlock { Index = s_kept.Count, Data = new byte[1024] });
                GC.KeepAlive(new byte[1024]);
            }
        }

        public bool OnCommand(string command)
        {
            string[] parts = command.Split(' ', StringSplitOptions.RemoveEmptyEntries);
            if (parts[0] == "grow" && parts.Length == 2)
            {
                Grow(int.Parse(parts[1]));
                Console.Out.WriteLine("SOSEXT-GROWN " + s_kept.Count);
                return true;
            }
            if (parts[0] == "gc")
            {
                GC.Collect(2, GCCollectionMode.Forced, blocking: true, compacting: true);
                GC.WaitForPendingFinalizers();
                GC.Collect(2, GCCollectionMode.Forced, blocking: true, compacting: true);
                Console.Out.WriteLine("SOSEXT-COUNTERS " + Describe());
                return true;
            }
            return false;
        }

        private static string Describe()
        {
            GCMemoryInfo info = GC.GetGCMemoryInfo(GCKind.Any);
            var w = new Json();
            w.BeginObject();
            w.Prop("kept", s_kept.Count);
            w.Prop("heapSizeBytes", info.HeapSizeBytes);
            w.Prop("fragmentedBytes", info.FragmentedBytes);
            w.Prop("totalCommittedBytes", info.TotalCommittedBytes);
            w.Prop("index", info.Index);
            w.Name("generations").BeginArray();
            foreach (GCGenerationInfo g in info.GenerationInfo)
            {
                w.BeginObject();
                w.Prop("sizeAfterBytes", g.SizeAfterBytes);
                w.Prop("fragmentationAfterBytes", g.FragmentationAfterBytes);
                w.EndObject();
            }
            w.EndArray();
            w.Name("collectionCount").BeginArray();
            for (int gen = 0; gen <= GC.MaxGeneration; gen++) w.Value((long)GC.CollectionCount(gen));
            w.EndArray();
            w.Prop("totalAllocatedBytes", GC.GetTotalAllocatedBytes(precise: true));
            w.Prop("totalMemory", GC.GetTotalMemory(forceFullCollection: false));
            w.Prop("threadPoolThreadCount", ThreadPool.ThreadCount);
            w.EndObject();
            return w.ToString();
        }
    }

    internal sealed class CounterBlock
    {
        public int Index;
        public byte[] Data;
    }
}
