using System;
using System.Collections.Generic;
using System.Runtime.CompilerServices;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>The object the `stresslog` scenario moves with a compacting GC.</summary>
    public sealed class StressLogItem
    {
        public long Marker;
        public StressLogItem(long marker) { Marker = marker; }
    }

    /// <summary>Garbage allocated before the item, so that compaction slides the item down.</summary>
    public sealed class StressLogFiller
    {
        public long A, B, C, D;
    }

    /// <summary>Methods the `bpmd` tests break in: called only on a stdin command.</summary>
    public static class BpmdTargets
    {
        public static int Calls;

        /// <summary>Jitted during Build (called once), so its native code exists before the debugger attaches.</summary>
        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        public static int Jitted(int x)
        {
            Calls++;
            return x * 3 + Calls;
        }

        /// <summary>Never run before the "bpmd-fresh" command: not jitted when the breakpoint is set.</summary>
        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        public static int Fresh(int x)
        {
            Calls++;
            return x * 5 + Calls;
        }
    }

    /// <summary>
    /// `stresslog`: run with DOTNET_StressLog=1 (the harness's env), forces GCs of known
    /// generations and one compacting GC that moves a <see cref="StressLogItem"/> held by an
    /// address-exposed stack local, so the GC logs the root's relocation. The truth holds each
    /// forced GC's index (GC.CollectionCount(0) after it) and generation, and the moved object's
    /// root slot, addresses before and after, MethodTable and the index of the GC that moved it.
    /// Stdin "bpmd-jitted" / "bpmd-fresh" call <see cref="BpmdTargets"/>' methods (for bpmd).
    /// </summary>
    internal sealed class StressLogScenario : IScenario
    {
        private const int MaxMoveAttempts = 20;

        private readonly List<(int Index, int Generation)> _forced = new List<(int, int)>();
        private nint _root, _before, _after;
        private int _moveIndex = -1;

        public void Build(string[] args)
        {
            BpmdTargets.Jitted(1);
        }

        public void Settle(int attempt)
        {
            _forced.Clear();
            foreach (int gen in new[] { 0, 1, 2 })
            {
                GC.Collect(gen, GCCollectionMode.Forced, blocking: true, compacting: false);
                _forced.Add((GC.CollectionCount(0), gen));
            }
            for (int i = 0; i < MaxMoveAttempts && !MoveOne(); i++) { }
        }

        /// <summary>Allocates filler then the item, compacts gen0, and records whether the item moved.</summary>
        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private unsafe bool MoveOne()
        {
            var filler = new StressLogFiller[64];
            for (int i = 0; i < filler.Length; i++) filler[i] = new StressLogFiller();
            StressLogItem item = new StressLogItem(0x5717E55L);
            filler = null;
            nint slot = (nint)Unsafe.AsPointer(ref item);  // address-exposed: a stack slot the GC reports
            nint before = Mem.AddrOfSlot(ref item);
            GC.Collect(0, GCCollectionMode.Forced, blocking: true, compacting: true);
            int index = GC.CollectionCount(0);
            nint after = Mem.AddrOfSlot(ref item);
            GC.KeepAlive(item);
            GC.KeepAlive(filler);
            if (before == after) return false;
            _root = slot;
            _before = before;
            _after = after;
            _moveIndex = index;
            return true;
        }

        public void WriteTruth(Json w)
        {
            w.Name("stressLog").BeginObject();
            w.Name("forced").BeginArray();
            foreach (var (index, gen) in _forced)
            {
                w.BeginObject();
                w.Prop("index", index);
                w.Prop("generation", gen);
                w.EndObject();
            }
            w.EndArray();
            w.Name("moved").BeginObject();
            w.Prop("gcIndex", _moveIndex);
            w.PropHex("root", _root);
            w.PropHex("before", _before);
            w.PropHex("after", _after);
            w.PropHex("mt", typeof(StressLogItem).TypeHandle.Value);
            w.EndObject();
            w.Prop("gcCount", GC.CollectionCount(0));
            w.EndObject();
            w.Name("bpmd").BeginObject();
            w.Prop("calls", BpmdTargets.Calls);
            // MethodHandle.Value is the method's MethodDesc (reflection does not compile it).
            w.PropHex("jittedMd", typeof(BpmdTargets).GetMethod(nameof(BpmdTargets.Jitted)).MethodHandle.Value);
            w.PropHex("freshMd", typeof(BpmdTargets).GetMethod(nameof(BpmdTargets.Fresh)).MethodHandle.Value);
            w.EndObject();
        }

        public bool OnCommand(string command)
        {
            switch (command)
            {
                case "bpmd-jitted":
                    Console.Out.WriteLine("SOSEXT-BPMD " + BpmdTargets.Jitted(7));
                    return true;
                case "bpmd-fresh":
                    Console.Out.WriteLine("SOSEXT-BPMD " + BpmdTargets.Fresh(7));
                    return true;
                default:
                    return false;
            }
        }
    }
}
