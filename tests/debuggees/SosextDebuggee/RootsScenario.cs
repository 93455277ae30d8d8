using System;
using System.Collections.Generic;
using System.Reflection;
using System.Runtime;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;
using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// Every kind of GC root, and three classic leaks, each with the exact chain of objects the
    /// scenario built so gcroot's output can be checked link by link:
    /// cache entries held by a hosted worker's MemoryCache that a static Timer keeps alive;
    /// customer names held by a Processor living in a named thread's local;
    /// a data-target wrapper behind a strong GC handle, five objects down.
    /// Plus a local on a named thread, a pinned handle, a weak handle (not a root), a dependent
    /// handle, an object only the finalizer queue keeps, a generic type's static and a caught exception.
    /// </summary>
    internal sealed class RootsScenario : IScenario
    {
        public const int CacheEntries = 40, PayloadSize = 10_000, Customers = 12, LongChain = 100_000;

        private static Timer s_timer;
        // The worker is held only by the timer (its callback's target); the scenario finds it weakly.
        private static WeakReference s_workerRef;
        private static HostedWorker Worker => (HostedWorker)s_workerRef.Target;
        private static LongChainNode s_chainHead;
        private static GCHandle s_wrapperHandle, s_pinnedHandle, s_weakHandle;
        private static DependentHandle s_dependent;
        private static DependentPrimary s_primary;
        private static RootsTestException s_caught;

        private static readonly StackHolder s_processorThread = new StackHolder("sosext-processor", ProcessorBody);
        private static readonly StackHolder s_namedThread = new StackHolder("sosext-named-local", NamedLocalBody);
        private static readonly StackHolder s_locker = new StackHolder("sosext-locker", LockerBody);
        private static readonly LockTarget s_lockTarget = new LockTarget();

        // Known only by address: what the finalizer queue holds, and the weakly held object.
        private static nint s_holderAddr, s_targetAddr, s_weakAddr;

        public void Build(string[] args)
        {
            // Block the finalizer thread for good first: later finalizable garbage then waits in the queue.
            BlockFinalizerThread();

            StartWorker();
            s_chainHead = MakeLongChain();

            var link1 = new HandleLink1 { Next = new HandleLink2 { Next = new HandleLink3 { Next = new HandleLink4 { Next = new DataTargetWrapper() } } } };
            s_wrapperHandle = GCHandle.Alloc(link1, GCHandleType.Normal);
            s_pinnedHandle = GCHandle.Alloc(new PinnedBlob[8], GCHandleType.Pinned);

            s_primary = new DependentPrimary { Value = 1 };
            s_dependent = new DependentHandle(s_primary, new DependentSecondary { Value = 2 });

            RootedGenericStatic<GenericStaticItem>.Value = new GenericStaticItem();

            try { ThrowForTest(); }
            catch (RootsTestException e) { s_caught = e; }

            MakeFinalizerOnlyChain();
            s_processorThread.Start();
            s_namedThread.Start();
            s_locker.Start();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void StartWorker()
        {
            var worker = new HostedWorker();
            for (int i = 0; i < CacheEntries; i++)
                worker.Cache.Entries.Add(i, new CacheEntry { Key = i, Payload = new byte[PayloadSize], Created = DateTime.UnixEpoch });
            s_timer = new Timer(worker.OnTimer, null, 3_600_000, 3_600_000);
            s_workerRef = new WeakReference(worker);
        }

        /// <summary>A long singly linked list whose tail points back to the head: deep and cyclic.</summary>
        private static LongChainNode MakeLongChain()
        {
            var head = new LongChainNode { Index = 0 };
            LongChainNode node = head;
            for (int i = 1; i < LongChain; i++)
            {
                node.Next = new LongChainNode { Index = i };
                node = node.Next;
            }
            node.Next = head;
            return head;
        }

        private static void ThrowForTest() => throw new RootsTestException("sosext roots test exception");

        private static void BlockFinalizerThread()
        {
            MakeBlocker();
            GC.Collect();
            if (!FinalizerBlocker.Entered.Wait(30_000)) throw new InvalidOperationException("the finalizer never ran");
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void MakeBlocker() => _ = new FinalizerBlocker();

        private static void MakeFinalizerOnlyChain()
        {
            MakeHolder();
            GC.Collect(); // the holder is unreachable: it moves to the ready-for-finalization queue
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void MakeHolder()
        {
            var holder = new FinalizerOnlyHolder { Target = new FinalizerOnlyTarget() };
            s_holderTracker = GCHandle.Alloc(holder, GCHandleType.WeakTrackResurrection);
        }

        public void Settle(int attempt)
        {
            if (s_weakHandle.IsAllocated) s_weakHandle.Free();
            GC.Collect();
            GC.Collect();
            // Allocated after the last GC and held only weakly: dead, but still on the heap.
            s_weakHandle = GCHandle.Alloc(new WeakOnlyItem { Value = attempt }, GCHandleType.Weak);
        }

        public void WriteTruth(Json w)
        {
            s_processorThread.Report();
            s_namedThread.Report();
            FindQueuedHolder();
            s_weakAddr = Mem.Addr(s_weakHandle.Target);

            var types = new TypeTable(trackAddresses: true, dedupe: true);
            foreach (Type t in new[]
            {
                typeof(CacheEntry), typeof(MemoryCache), typeof(HostedWorker), typeof(Customer), typeof(Processor),
                typeof(HandleLink1), typeof(HandleLink2), typeof(HandleLink3), typeof(HandleLink4), typeof(DataTargetWrapper),
                typeof(NamedLocalItem), typeof(PinnedBlob[]), typeof(WeakOnlyItem), typeof(DependentPrimary),
                typeof(DependentSecondary), typeof(FinalizerBlocker), typeof(FinalizerOnlyHolder), typeof(FinalizerOnlyTarget),
                typeof(GenericStaticItem), typeof(RootsTestException),
            }) types.Declare(t);
            HostedWorker worker = Worker;
            foreach (CacheEntry e in worker.Cache.Entries.Values) types.AddLive(e);
            types.AddLive(worker.Cache);
            types.AddLive(worker);
            // Counted, not listed: 100,000 addresses would make gathering allocate enough to trigger a GC.
            LongChainNode tail = s_chainHead;
            for (int i = 1; i < LongChain; i++) tail = tail.Next;
            var link1 = (HandleLink1)s_wrapperHandle.Target;
            types.AddLive(link1); types.AddLive(link1.Next); types.AddLive(link1.Next.Next);
            types.AddLive(link1.Next.Next.Next); types.AddLive(link1.Next.Next.Next.Next);
            types.AddLive(s_pinnedHandle.Target);
            types.AddLive(s_primary);
            types.AddLive(s_dependent.Dependent);
            types.AddLive(FinalizerBlocker.Resurrected);
            types.AddLive(RootedGenericStatic<GenericStaticItem>.Value);
            types.AddLive(s_caught);
            // Known by address only (referencing them from here would make them reachable).
            types.AddLiveRaw(typeof(FinalizerOnlyHolder), s_holderAddr, Mem.MtBaseSize(typeof(FinalizerOnlyHolder).TypeHandle.Value), 2);
            types.AddLiveRaw(typeof(FinalizerOnlyTarget), s_targetAddr, Mem.MtBaseSize(typeof(FinalizerOnlyTarget).TypeHandle.Value), 2);
            types.AddDead(typeof(WeakOnlyItem), s_weakAddr, Mem.MtBaseSize(typeof(WeakOnlyItem).TypeHandle.Value));
            s_processorThread.AddTo(types);
            s_namedThread.AddTo(types);
            w.Name("types");
            types.Write(w);

            var dict = worker.Cache.Entries;
            w.Name("cacheLeak").BeginObject();
            w.PropHex("worker", Mem.Addr(worker));
            w.PropHex("timer", Mem.Addr(s_timer));
            w.Name("chain").BeginArray();
            foreach (object o in new object[] { worker, worker.Cache, dict, EntriesArray(dict), dict[0] }) w.Hex(Mem.Addr(o));
            w.EndArray();
            w.Prop("entries", CacheEntries);
            w.Prop("payloadSize", PayloadSize);
            w.EndObject();

            w.Name("customerLeak").BeginObject();
            s_processorThread.WriteThread(w);
            w.Name("chain").BeginArray();
            foreach (nint a in s_processorThread.Chain) w.Hex(a);
            w.EndArray();
            w.EndObject();

            w.Name("wrapperLeak").BeginObject();
            w.PropHex("handle", GCHandle.ToIntPtr(s_wrapperHandle));
            w.Name("chain").BeginArray();
            foreach (object o in new object[] { link1, link1.Next, link1.Next.Next, link1.Next.Next.Next, link1.Next.Next.Next.Next })
                w.Hex(Mem.Addr(o));
            w.EndArray();
            w.EndObject();

            w.Name("namedLocal").BeginObject();
            s_namedThread.WriteThread(w);
            w.PropHex("address", s_namedThread.Chain[0]);
            w.EndObject();

            w.Name("pinned").BeginObject();
            w.PropHex("handle", GCHandle.ToIntPtr(s_pinnedHandle));
            w.PropHex("object", Mem.Addr(s_pinnedHandle.Target));
            w.EndObject();

            w.Name("weak").BeginObject();
            w.PropHex("handle", GCHandle.ToIntPtr(s_weakHandle));
            w.PropHex("object", s_weakAddr);
            w.EndObject();

            w.Name("dependent").BeginObject();
            w.PropHex("primary", Mem.Addr(s_primary));
            w.PropHex("secondary", Mem.Addr(s_dependent.Dependent));
            w.EndObject();

            w.Name("finalizerOnly").BeginObject();
            w.PropHex("holder", s_holderAddr);
            w.PropHex("target", s_targetAddr);
            w.EndObject();

            w.Name("genericStatic").BeginObject();
            w.PropHex("address", Mem.Addr(RootedGenericStatic<GenericStaticItem>.Value));
            w.EndObject();

            w.Name("longChain").BeginObject();
            w.PropHex("head", Mem.Addr(s_chainHead));
            w.PropHex("tail", Mem.Addr(tail));
            w.Prop("length", LongChain);
            w.PropHex("mt", typeof(LongChainNode).TypeHandle.Value);
            w.EndObject();
            worker = null;
            tail = null;

            w.Name("thinLock").BeginObject();
            w.PropHex("object", Mem.Addr(s_lockTarget));
            s_locker.WriteThread(w);
            w.EndObject();

            w.Name("exception").BeginObject();
            w.PropHex("address", Mem.Addr(s_caught));
            w.PropHex("mt", typeof(RootsTestException).TypeHandle.Value);
            w.Prop("message", s_caught.Message);
            w.EndObject();
        }

        private static object EntriesArray(Dictionary<int, CacheEntry> dict) =>
            typeof(Dictionary<int, CacheEntry>).GetField("_entries", BindingFlags.NonPublic | BindingFlags.Instance).GetValue(dict);

        /// <summary>The holder is reachable only from the finalizer queue; a weak-long handle taken
        /// before it was dropped still finds it there.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void FindQueuedHolder()
        {
            var holder = (FinalizerOnlyHolder)s_holderTracker.Target;
            s_holderAddr = Mem.Addr(holder);
            s_targetAddr = Mem.Addr(holder.Target);
            holder = null;
        }

        // A weak *long* handle tracks an object through finalization (it is not a root), so the
        // scenario can name the queued holder's address without keeping it alive itself.
        private static GCHandle s_holderTracker;

        // -- threads whose stacks hold objects ------------------------------------------------------
        // The objects live only in a local of the thread's method; helpers that look at them are
        // separate non-inlined methods so that no other stack slot keeps a reference afterwards.

        private static void ProcessorBody(StackHolder self)
        {
            Processor processor = NewProcessor();
            self.Started();
            while (true)
            {
                TypeTable types = self.WaitRequest();
                if (types != null) AddProcessor(types, processor);
                else self.Chain = ProcessorChain(processor);
                self.Done();
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static Processor NewProcessor()
        {
            var processor = new Processor();
            for (int i = 0; i < Customers; i++)
                processor.Cache.Add(i, new Customer { Id = i, Name = string.Concat("sosext-customer-", i.ToString("d2")) });
            return processor;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static nint[] ProcessorChain(Processor processor)
        {
            var dict = processor.Cache;
            object entries = typeof(Dictionary<int, Customer>).GetField("_entries", BindingFlags.NonPublic | BindingFlags.Instance).GetValue(dict);
            return new[] { Mem.Addr(processor), Mem.Addr(dict), Mem.Addr(entries), Mem.Addr(dict[0]), Mem.Addr(dict[0].Name) };
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void AddProcessor(TypeTable types, Processor processor)
        {
            types.AddLive(processor);
            foreach (Customer c in processor.Cache.Values) types.AddLive(c);
        }

        private static void NamedLocalBody(StackHolder self)
        {
            NamedLocalItem item = NewNamedLocalItem();
            self.Started();
            while (true)
            {
                TypeTable types = self.WaitRequest();
                if (types != null) AddItem(types, item);
                else self.Chain = new[] { Mem.Addr(item) };
                self.Done();
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static NamedLocalItem NewNamedLocalItem() => new NamedLocalItem();

        /// <summary>Holds a thin lock (an uncontended Monitor on a fresh object) while it waits.</summary>
        private static void LockerBody(StackHolder self)
        {
            lock (s_lockTarget)
            {
                self.Started();
                while (true)
                {
                    self.WaitRequest();
                    self.Done();
                }
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void AddItem(TypeTable types, NamedLocalItem item) => types.AddLive(item);

        public bool OnCommand(string command) => false;
    }

    /// <summary>
    /// A thread whose stack alone holds some objects. On request it reports their addresses (they
    /// can move in every GC, so only after the last one) or adds them to a type table, then waits again.
    /// </summary>
    internal sealed class StackHolder
    {
        private readonly string _name;
        private readonly Action<StackHolder> _body;
        private readonly ManualResetEventSlim _ready = new ManualResetEventSlim(false, 0);
        private readonly ManualResetEventSlim _request = new ManualResetEventSlim(false, 0);
        private readonly ManualResetEventSlim _done = new ManualResetEventSlim(false, 0);
        private TypeTable _types;
        public nint[] Chain = new nint[0];
        public int OsTid, ManagedId;

        public StackHolder(string name, Action<StackHolder> body)
        {
            _name = name;
            _body = body;
        }

        public void Start()
        {
            var t = new Thread(() => _body(this)) { Name = _name, IsBackground = true };
            t.Start();
            ManagedId = t.ManagedThreadId;
            _ready.Wait();
        }

        // On the thread.
        public void Started()
        {
            OsTid = Mem.CurrentOsTid();
            _ready.Set();
        }

        public TypeTable WaitRequest()
        {
            _request.Wait();
            _request.Reset();
            TypeTable t = _types;
            _types = null;
            return t;
        }

        public void Done() => _done.Set();

        // On the main thread.
        public void Report() => Ask(null);

        public void AddTo(TypeTable types) => Ask(types);

        private void Ask(TypeTable types)
        {
            _done.Reset();
            _types = types;
            _request.Set();
            _done.Wait();
        }

        public void WriteThread(Json w)
        {
            w.Name("thread").BeginObject();
            w.Prop("name", _name);
            w.Prop("osTid", OsTid);
            w.Prop("managedId", ManagedId);
            w.EndObject();
        }
    }
}
