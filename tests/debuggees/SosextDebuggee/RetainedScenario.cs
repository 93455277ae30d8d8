using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;
using SosextDebuggee.Retained;

namespace SosextDebuggee.Retained
{
    // Every instance of these types is built by the scenario, so the truth covers them all.
    public sealed class RetTree { public RetBranch Left, Right; public byte[] Own; }
    public sealed class RetBranch { public RetShared Child; public byte[] Own; }
    public sealed class RetShared { public RetLeaf Leaf; }
    public sealed class RetLeaf { public byte[] Payload; }
    public sealed class RetRing { public RetRing Next; public byte[] Payload; }
    public sealed class RetKey { public int Id; }
    public sealed class RetValue { public byte[] Payload; }

    /// <summary>Finalizable and unreachable: only the ready-for-finalization queue holds it.</summary>
    public sealed class RetFinalHolder
    {
        public RetFinalTarget Target;
        ~RetFinalHolder() => GC.KeepAlive(Target);
    }

    public sealed class RetFinalTarget { public byte[] Payload; }

    /// <summary>Its finalizer never returns, so later finalizable garbage waits in the queue.</summary>
    public sealed class RetBlocker
    {
        internal static readonly ManualResetEventSlim Entered = new ManualResetEventSlim(false, 0);
        internal static readonly ManualResetEventSlim Release = new ManualResetEventSlim(false, 0);
        ~RetBlocker() { Entered.Set(); Release.Wait(); }
    }
}

namespace DebuggeeHost
{
    /// <summary>
    /// An object graph of known shape for retained sizes and dominators, with each object's
    /// retained size computed here from the runtime's own object sizes (MethodTable base size
    /// plus components, as dumpheap counts them):
    /// a tree whose two branches share one subgraph (the shared part is retained by the tree,
    /// by neither branch); a three-node cycle; a value kept only by a dependent handle
    /// (ConditionalWeakTable) from its key; an object only the finalizer queue holds.
    /// </summary>
    internal sealed class RetainedScenario : IScenario
    {
        private static RetTree s_tree;
        private static RetRing s_ring;
        private static RetKey s_key;
        private static ConditionalWeakTable<RetKey, RetValue> s_table;
        private static GCHandle s_finalTracker;  // weak, tracking resurrection: finds the queued holder
        private static long s_finalHolderSize, s_finalTargetSize, s_finalPayloadSize;
        private static nint s_finalHolderAddr, s_finalTargetAddr, s_finalPayloadAddr;

        public void Build(string[] args)
        {
            MakeBlocker();
            GC.Collect();
            if (!RetBlocker.Entered.Wait(30_000)) throw new InvalidOperationException("the finalizer never ran");
            MakeGraph();
            MakeFinalizerOnly();
            GC.Collect(); // the holder is unreachable: it moves to the ready-for-finalization queue
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void MakeBlocker() => _ = new RetBlocker();

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void MakeGraph()
        {
            var shared = new RetShared { Leaf = new RetLeaf { Payload = new byte[3000] } };
            s_tree = new RetTree
            {
                Own = new byte[100],
                Left = new RetBranch { Child = shared, Own = new byte[200] },
                Right = new RetBranch { Child = shared, Own = new byte[300] },
            };
            var r0 = new RetRing { Payload = new byte[1000] };
            var r1 = new RetRing { Payload = new byte[1100] };
            var r2 = new RetRing { Payload = new byte[1200] };
            r0.Next = r1; r1.Next = r2; r2.Next = r0;
            s_ring = r0;
            s_key = new RetKey { Id = 7 };
            s_table = new ConditionalWeakTable<RetKey, RetValue>();
            s_table.Add(s_key, new RetValue { Payload = new byte[5000] });
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void MakeFinalizerOnly()
        {
            var holder = new RetFinalHolder { Target = new RetFinalTarget { Payload = new byte[7000] } };
            s_finalHolderSize = Mem.UnalignedSizeOf(holder);
            s_finalTargetSize = Mem.UnalignedSizeOf(holder.Target);
            s_finalPayloadSize = Mem.UnalignedSizeOf(holder.Target.Payload);
            s_finalTracker = GCHandle.Alloc(holder, GCHandleType.WeakTrackResurrection);
        }

        public void Settle(int attempt)
        {
            GC.Collect();
            GC.Collect();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void FindQueuedHolder()
        {
            var holder = (RetFinalHolder)s_finalTracker.Target;
            s_finalHolderAddr = Mem.Addr(holder);
            s_finalTargetAddr = Mem.Addr(holder.Target);
            s_finalPayloadAddr = Mem.Addr(holder.Target.Payload);
        }

        private static long S(object o) => Mem.UnalignedSizeOf(o);

        private static void Obj(Json w, string name, object o, long retained, object idom)
        {
            w.BeginObject();
            w.Prop("name", name);
            w.PropHex("address", Mem.Addr(o));
            w.Prop("type", o.GetType().FullName);
            w.PropHex("mt", o.GetType().TypeHandle.Value);
            w.Prop("size", S(o));
            w.Prop("retained", retained);
            if (idom == null) w.Name("idom").Null(); else w.PropHex("idom", Mem.Addr(idom));
            w.EndObject();
        }

        public void WriteTruth(Json w)
        {
            FindQueuedHolder();
            RetTree t = s_tree;
            RetShared sh = t.Left.Child;
            RetRing r0 = s_ring, r1 = r0.Next, r2 = r1.Next;
            s_table.TryGetValue(s_key, out RetValue value);

            long leaf = S(sh.Leaf) + S(sh.Leaf.Payload);
            long shared = S(sh) + leaf;
            long left = S(t.Left) + S(t.Left.Own), right = S(t.Right) + S(t.Right.Own);
            long ring2 = S(r2) + S(r2.Payload), ring1 = S(r1) + S(r1.Payload) + ring2;
            long valueRetained = S(value) + S(value.Payload);

            w.Name("retained").BeginObject();
            w.Name("objects").BeginArray();
            // idom: the immediate dominator built here; null where the scenario does not fix it
            // (the top of a static's chain is the runtime's statics array).
            Obj(w, "tree", t, S(t) + S(t.Own) + left + right + shared, null);
            Obj(w, "tree.Own", t.Own, S(t.Own), t);
            Obj(w, "left", t.Left, left, t);
            Obj(w, "left.Own", t.Left.Own, S(t.Left.Own), t.Left);
            Obj(w, "right", t.Right, right, t);
            Obj(w, "right.Own", t.Right.Own, S(t.Right.Own), t.Right);
            Obj(w, "shared", sh, shared, t);
            Obj(w, "leaf", sh.Leaf, leaf, sh);
            Obj(w, "leaf.Payload", sh.Leaf.Payload, S(sh.Leaf.Payload), sh.Leaf);
            Obj(w, "ring0", r0, S(r0) + S(r0.Payload) + ring1, null);
            Obj(w, "ring0.Payload", r0.Payload, S(r0.Payload), r0);
            Obj(w, "ring1", r1, ring1, r0);
            Obj(w, "ring1.Payload", r1.Payload, S(r1.Payload), r1);
            Obj(w, "ring2", r2, ring2, r1);
            Obj(w, "ring2.Payload", r2.Payload, S(r2.Payload), r2);
            Obj(w, "key", s_key, S(s_key) + valueRetained, null);
            Obj(w, "value", value, valueRetained, s_key);
            Obj(w, "value.Payload", value.Payload, S(value.Payload), value);
            w.EndArray();
            // Known by address only: referencing them here would make them reachable.
            w.Name("finalizerOnly").BeginObject();
            w.PropHex("holder", s_finalHolderAddr);
            w.PropHex("target", s_finalTargetAddr);
            w.PropHex("payload", s_finalPayloadAddr);
            w.Prop("holderRetained", s_finalHolderSize + s_finalTargetSize + s_finalPayloadSize);
            w.Prop("targetRetained", s_finalTargetSize + s_finalPayloadSize);
            w.EndObject();
            w.Name("statics").BeginObject();
            w.Prop("tree", typeof(RetainedScenario).FullName + ".s_tree");
            w.Prop("ring", typeof(RetainedScenario).FullName + ".s_ring");
            w.Prop("key", typeof(RetainedScenario).FullName + ".s_key");
            w.EndObject();
            w.EndObject();
            GC.KeepAlive(value);
        }

        public bool OnCommand(string command) => false;
    }
}
