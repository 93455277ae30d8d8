using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>A struct argument and local of the `stackvalues` frame.</summary>
    public struct StackValuesPoint
    {
        public int X;
        public long Y;
    }

    /// <summary>An object the `stackvalues` frame takes as an argument and holds in a local.</summary>
    public sealed class StackValuesItem
    {
        public int Tag;
        public StackValuesItem(int tag) { Tag = tag; }
    }

    /// <summary>Thrown and kept by the `stackvalues` scenario's faulting thread (clrma).</summary>
    public sealed class StackValuesException : Exception
    {
        public const int Code = unchecked((int)0x80131577);
        public StackValuesException(string message) : base(message) { HResult = Code; }
    }

    /// <summary>
    /// `stackvalues`: frames with known argument and local values, parked threads, an exception.
    /// * "sosext-values" calls ValuesFrame(int, long, bool, double, string, StackValuesItem,
    ///   StackValuesPoint), which computes one local of each kind from them and blocks; the method is
    ///   not optimized, so every argument and local lives in a stack slot the runtime can describe.
    /// * ParkedA threads run ParkOuter → ParkA → ParkLeaf, ParkedB threads ParkOuter → ParkB →
    ///   ParkLeaf, all blocked in ParkLeaf (for parallelstacks: one common root, two branches).
    /// * "sosext-values-thrower" throws a StackValuesException from ValuesThrowInner, catches it and
    ///   blocks inside the catch block, so it stays the thread's current exception (for clrma).
    /// The truth holds every value as C# formats it, the objects' addresses and the threads' ids.
    /// stdin "crash" throws on a new thread, unhandled; "fpspin" starts a thread spinning in FpSpin with
    /// a double in an XMM register; "filterwait", "finallywait" and "morewaits" start threads blocked in
    /// an exception filter, a finally block of the second pass, a catch inside a finally, a callback
    /// from native code and a static constructor (each reply names the threads); "gcstorm" starts
    /// threads the GC suspends over and over.
    /// </summary>
    internal sealed class StackValuesScenario : IScenario
    {
        public const int CountArg = 42;
        public const long BigArg = 0x1122334455667788L;
        public const bool FlagArg = true;
        public const double RatioArg = 3.25;
        public const string TextArg = "sosext-value-text";
        public const string ExceptionMessage = "sosext clrma exception";
        public const int ParkedA = 3;
        public const int ParkedB = 2;

        private static readonly ManualResetEventSlim s_block = new ManualResetEventSlim(false, 0);
        private static readonly CountdownEvent s_ready = new CountdownEvent(2 + ParkedA + ParkedB);

        private static int s_valuesTid, s_throwerTid;
        private static readonly int[] s_parkedA = new int[ParkedA];
        private static readonly int[] s_parkedB = new int[ParkedB];
        private static StackValuesItem s_item, s_localItem;
        private static string s_text, s_localText;
        private static StackValuesPoint s_point, s_localPoint;
        private static int s_localCount;
        private static long s_localBig;
        private static StackValuesException s_exception;

        public void Build(string[] args)
        {
            Start("sosext-values", ValuesThreadMain);
            Start("sosext-values-thrower", ThrowerThreadMain);
            for (int i = 0; i < ParkedA; i++)
            {
                int slot = i;
                Start("sosext-parked-a", () => ParkOuter(true, slot));
            }
            for (int i = 0; i < ParkedB; i++)
            {
                int slot = i;
                Start("sosext-parked-b", () => ParkOuter(false, slot));
            }
            if (!s_ready.Wait(30_000)) throw new TimeoutException("a stackvalues thread did not start");
            if (s_exception == null) throw new InvalidOperationException("the stackvalues thrower caught nothing");
        }

        private static readonly System.Collections.Generic.List<Thread> s_threads = new();

        private static void Start(string name, ThreadStart body)
        {
            var t = new Thread(body) { Name = name, IsBackground = true };
            s_threads.Add(t);
            t.Start();
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void ValuesThreadMain()
        {
            s_valuesTid = Mem.CurrentOsTid();
            var item = new StackValuesItem(0x7A6);
            var point = new StackValuesPoint { X = -7, Y = 0x0123456789AL };
            string text = string.Concat("sosext-", "value-text");
            ValuesFrame(CountArg, BigArg, FlagArg, RatioArg, text, item, point);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void ValuesFrame(int count, long big, bool flag, double ratio, string text,
                                         StackValuesItem item, StackValuesPoint point)
        {
            int localCount = count * 3;
            long localBig = big - 1;
            string localText = string.Concat(text, "-local");
            var localItem = new StackValuesItem(count + 1);
            var localPoint = new StackValuesPoint { X = point.X * 2, Y = point.Y + 1 };
            s_item = item;
            s_text = text;
            s_point = point;
            s_localCount = localCount;
            s_localBig = localBig;
            s_localText = localText;
            s_localItem = localItem;
            s_localPoint = localPoint;
            s_ready.Signal();
            s_block.Wait();
            GC.KeepAlive(localItem);
            GC.KeepAlive(localText);
            GC.KeepAlive(flag ? ratio : 0);
        }

        // -- parked threads ----------------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void ParkOuter(bool a, int slot)
        {
            if (a) ParkA(slot); else ParkB(slot);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void ParkA(int slot)
        {
            s_parkedA[slot] = Mem.CurrentOsTid();
            ParkLeaf();
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void ParkB(int slot)
        {
            s_parkedB[slot] = Mem.CurrentOsTid();
            ParkLeaf();
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void ParkLeaf()
        {
            s_ready.Signal();
            s_block.Wait();
        }

        // -- the thrower -------------------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void ThrowerThreadMain()
        {
            s_throwerTid = Mem.CurrentOsTid();
            try
            {
                ValuesThrowOuter();
            }
            catch (StackValuesException e)
            {
                s_exception = e;
                s_ready.Signal();
                s_block.Wait();
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void ValuesThrowOuter() => ValuesThrowInner();

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void ValuesThrowInner() => throw new StackValuesException(ExceptionMessage);

        public void Settle(int attempt)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }

        public void WriteTruth(Json w)
        {
            // Every thread blocked in its wait, not on its way there: the stacks are the ones described.
            foreach (Thread t in s_threads)
                for (int spins = 0; spins < 5000 && (t.ThreadState & System.Threading.ThreadState.WaitSleepJoin) == 0; spins++)
                    Thread.Sleep(1);
            string type = typeof(StackValuesScenario).FullName;
            w.Name("values").BeginObject();
            w.Prop("osTid", s_valuesTid);
            w.Prop("method", type + ".ValuesFrame");
            w.Prop("count", CountArg);
            w.Prop("big", BigArg);
            w.Prop("flag", FlagArg);
            w.Prop("ratio", RatioArg);
            w.Prop("text", s_text);
            w.PropHex("textAddress", Mem.Addr(s_text));
            w.PropHex("item", Mem.Addr(s_item));
            w.Prop("itemTag", s_item.Tag);
            w.Prop("itemType", typeof(StackValuesItem).FullName);
            w.Prop("pointType", typeof(StackValuesPoint).FullName);
            w.Prop("pointX", s_point.X);
            w.Prop("pointY", s_point.Y);
            w.Prop("localCount", s_localCount);
            w.Prop("localBig", s_localBig);
            w.Prop("localText", s_localText);
            w.PropHex("localTextAddress", Mem.Addr(s_localText));
            w.PropHex("localItem", Mem.Addr(s_localItem));
            w.Prop("localItemTag", s_localItem.Tag);
            w.Prop("localPointX", s_localPoint.X);
            w.Prop("localPointY", s_localPoint.Y);
            w.EndObject();

            w.Name("parked").BeginObject();
            w.Prop("outer", type + ".ParkOuter");
            w.Prop("leaf", type + ".ParkLeaf");
            foreach ((string key, string method, int[] tids) in new[] { ("a", "ParkA", s_parkedA), ("b", "ParkB", s_parkedB) })
            {
                w.Name(key).BeginObject();
                w.Prop("method", type + "." + method);
                w.Name("osTids").BeginArray();
                foreach (int t in tids) w.Value(t);
                w.EndArray();
                w.EndObject();
            }
            w.EndObject();

            w.Name("thrower").BeginObject();
            w.Prop("osTid", s_throwerTid);
            w.PropHex("exception", Mem.Addr(s_exception));
            w.Prop("type", typeof(StackValuesException).FullName);
            w.Prop("message", ExceptionMessage);
            w.Prop("hresult", (long)unchecked((uint)s_exception.HResult));
            w.Name("frames").BeginArray();
            foreach (string m in new[] { "ValuesThrowInner", "ValuesThrowOuter", "ThrowerThreadMain" })
                w.Value(type + "." + m);
            w.EndArray();
            w.EndObject();

            // What the stdin command "crash" will throw, unhandled, on a new thread.
            w.Name("crash").BeginObject();
            w.Prop("message", CrashMessage);
            w.Name("frames").BeginArray();
            foreach (string m in new[] { "CrashInner", "CrashOuter", "CrashThreadMain" })
                w.Value(type + "." + m);
            w.EndArray();
            w.EndObject();
        }

        // -- the crash (stdin "crash") ------------------------------------------------------------------

        public const string CrashMessage = "sosext unhandled exception";

        /// <summary>The stdin commands of the class summary. "crash" starts a thread that throws a
        /// StackValuesException nobody catches: the process dies (and the runtime writes a dump when
        /// DOTNET_DbgEnableMiniDump is set); the thread prints its OS thread id first.</summary>
        public bool OnCommand(string command)
        {
            switch (command)
            {
                case "crash":
                    new Thread(CrashThreadMain) { Name = "sosext-crasher", IsBackground = true }.Start();
                    return true;
                case "fpspin": StartFpSpin(); return true;
                case "filterwait": StartFilterWait(); return true;
                case "finallywait": StartFinallyWait(); return true;
                case "morewaits": StartMoreWaits(); return true;
                case "gcstorm": StartGcStorm(); return true;
                case "throwstorm": StartThrowStorm(); return true;
                case "stormfast":
                    s_stormPause = false;  // collections back to back again: more threads caught mid-suspension
                    Console.Out.WriteLine("SOSEXT-STORMFAST");
                    return true;
                default:
                    return false;
            }
        }

        // -- floating-point values in registers (stdin "fpspin") -----------------------------------------

        public const double FpScale = 3.25;
        public const float FpFactor = 1.5f;
        private static int s_fpTid, s_fpSpinning;

        /// <summary>Starts a thread that spins in <see cref="FpSpin"/>, a fully optimized leaf loop with
        /// no call in it, so the JIT keeps its double and float arguments in XMM registers there; answers
        /// "SOSEXT-FPSPIN {os tid} {method}" once the thread is in the loop. It spins until the process
        /// ends: a core taken now stops it with those registers live.</summary>
        private static void StartFpSpin()
        {
            new Thread(() => { s_fpTid = Mem.CurrentOsTid(); FpSpin(FpScale, FpFactor); })
                { Name = "sosext-values-fp", IsBackground = true }.Start();
            while (Volatile.Read(ref s_fpSpinning) == 0) Thread.Sleep(1);
            Console.Out.WriteLine($"SOSEXT-FPSPIN {s_fpTid} {typeof(StackValuesScenario).FullName}.FpSpin");
        }

        // -- a thread inside an exception filter (stdin "filterwait") ------------------------------------

        private static int s_filterTid;
        private static readonly ManualResetEventSlim s_inFilter = new ManualResetEventSlim(false, 0);
        private static StackValuesException s_filtered;

        /// <summary>Starts a thread that throws from FilterThrowInner and blocks in the filter of
        /// FilterThreadMain's catch clause: the exception's first pass is under way, so the frames it
        /// will unwind (FilterThrowInner, FilterThrowOuter) are still on the stack below the filter
        /// funclet. Answers "SOSEXT-FILTER {os tid} {exception address} {kept}", after a full GC:
        /// kept is the address of the object only FilterThrowOuter's frame holds when that GC left it
        /// alive, else 0 (the runtime's own answer to whether it reports that frame then).</summary>
        private static void StartFilterWait()
        {
            new Thread(FilterThreadMain) { Name = "sosext-values-filter", IsBackground = true }.Start();
            if (!s_inFilter.Wait(30_000)) throw new TimeoutException("the filter thread did not reach its filter");
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            Console.Out.WriteLine($"SOSEXT-FILTER {s_filterTid} {Mem.Addr(s_filtered):x} {KeptAddress():x}");
        }

        /// <summary>The address of the object FilterThrowOuter keeps if a GC during the filter left it
        /// alive (its frame was reported), else 0; read in a frame of its own, gone before the core.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        private static nint KeptAddress()
        {
            object kept = s_filterKeep.Target;
            return kept == null ? 0 : Mem.Addr(kept);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void FilterThreadMain()
        {
            s_filterTid = Mem.CurrentOsTid();
            try
            {
                FilterThrowOuter();
            }
            catch (StackValuesException e) when (FilterWait(e))
            {
                GC.KeepAlive(e);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static bool FilterWait(StackValuesException e)
        {
            s_filtered = e;
            s_inFilter.Set();
            s_block.Wait();
            return true;
        }

        private static WeakReference s_filterKeep;

        /// <summary>Holds an object only in a local, live across the call that throws: whether it
        /// survives a GC while the filter runs says whether the runtime reports this frame then.</summary>
        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void FilterThrowOuter()
        {
            var keep = new StackValuesItem(0x5EE);
            s_filterKeep = new WeakReference(keep);
            FilterThrowInner();
            GC.KeepAlive(keep);
        }

        private static int s_finallyTid;
        private static readonly ManualResetEventSlim s_inFinally = new ManualResetEventSlim(false, 0);

        /// <summary>Starts a thread whose exception's second pass runs FinallyThrower's finally block,
        /// which blocks: the frames between it and the catch in FinallyThreadMain are being unwound.
        /// Answers "SOSEXT-FINALLY {os tid} {exception address}".</summary>
        private static void StartFinallyWait()
        {
            new Thread(FinallyThreadMain) { Name = "sosext-values-finally", IsBackground = true }.Start();
            if (!s_inFinally.Wait(30_000)) throw new TimeoutException("the finally thread did not reach its finally block");
            Console.Out.WriteLine($"SOSEXT-FINALLY {s_finallyTid} {Mem.Addr(s_filtered):x}");
        }

        // -- threads the GC suspends over and over (stdin "gcstorm") -------------------------------------

        private static int s_stormSpinners;
        private static volatile bool s_stormPause;  // throwstorm: collections 1 ms apart, or the throwers wait on them

        /// <summary>Starts two threads that call a small method in a loop (code the GC suspends by
        /// hijacking a return address or at a call), one that spins in a loop with no call in it
        /// (fully interruptible code, which every suspension redirects) and one that collects in a
        /// loop, so a core taken now may catch threads in any state of a GC's suspension. Answers
        /// "SOSEXT-GCSTORM".</summary>
        private static void StartGcStorm(bool answer = true)
        {
            for (int i = 0; i < 2; i++)
                new Thread(StormSpin) { Name = "sosext-values-storm", IsBackground = true }.Start();
            new Thread(() => StormLoop(new StackValuesItem(0x5C))) { Name = "sosext-values-storm-loop", IsBackground = true }.Start();
            new Thread(() => { while (true) { GC.Collect(0); if (s_stormPause) Thread.Sleep(1); } })
                { Name = "sosext-values-collector", IsBackground = true }.Start();
            while (Volatile.Read(ref s_stormSpinners) < 3) Thread.Sleep(1);
            if (answer) Console.Out.WriteLine("SOSEXT-GCSTORM");
        }

        private static void StormSpin()
        {
            Interlocked.Increment(ref s_stormSpinners);
            object held = new StackValuesItem(0x57);
            long x = 1;
            while (true)
            {
                x = StormStep(x, held);
                if (x == 0) GC.KeepAlive(held);
            }
        }

        /// <summary>A loop with no call in it, fully optimized from the start: the JIT makes such code
        /// fully interruptible, so a GC's suspension stops this thread where it is, by redirecting
        /// it (a RedirectedThreadFrame), rather than at a hijacked return address. The loop reads
        /// held's field on every turn, so held stays live in a register of the redirected context.</summary>
        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.AggressiveOptimization)]
        private static void StormLoop(StackValuesItem held)
        {
            Interlocked.Increment(ref s_stormSpinners);
            long x = 1;
            while (true)
                x = x * 6364136223846793005L + Volatile.Read(ref held.Tag);
        }

        /// <summary>gcstorm, and two threads that throw and catch in a loop through a filter and a
        /// finally block, so a core taken now may catch a thread anywhere in exception dispatch.
        /// Answers "SOSEXT-THROWSTORM".</summary>
        private static void StartThrowStorm()
        {
            s_stormPause = true;
            StartGcStorm(answer: false);
            for (int i = 0; i < 2; i++)
                new Thread(ThrowLoop) { Name = "sosext-values-throwing", IsBackground = true }.Start();
            while (Volatile.Read(ref s_stormSpinners) < 5) Thread.Sleep(1);
            Console.Out.WriteLine("SOSEXT-THROWSTORM");
        }

        private const string StormMessage = "sosext storm exception";

        private static void ThrowLoop()
        {
            Interlocked.Increment(ref s_stormSpinners);
            var held = new StackValuesItem(0x7E);
            long n = 0;
            while (true)
            {
                try
                {
                    ThrowThroughFinally(n++);
                }
                catch (StackValuesException e) when (e.HResult != 0 && held.Tag != 0)
                {
                    GC.KeepAlive(held);
                }
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void ThrowThroughFinally(long n)
        {
            var local = new StackValuesItem((int)n);
            try
            {
                throw new StackValuesException(StormMessage);
            }
            finally
            {
                GC.KeepAlive(local);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static long StormStep(long x, object o) => (x * 6364136223846793005L + 1442695040888963407L) | (o == null ? 0 : 1);

        // -- more states a thread can be dumped in (stdin "morewaits") ----------------------------------

        private static readonly CountdownEvent s_moreReady = new CountdownEvent(3);
        private static int s_nestedTid, s_callbackTid, s_cctorTid;

        /// <summary>Starts three threads and answers "SOSEXT-MORE {nested} {callback} {cctor}" (their
        /// OS thread ids) once each blocks: one in a catch block of an exception thrown while another
        /// one's finally block ran (two exceptions in flight), one in a managed callback that libc's
        /// qsort calls (native frames between managed ones), one in a static constructor.</summary>
        private static void StartMoreWaits()
        {
            new Thread(NestedThreadMain) { Name = "sosext-values-nested", IsBackground = true }.Start();
            new Thread(CallbackThreadMain) { Name = "sosext-values-callback", IsBackground = true }.Start();
            new Thread(CctorThreadMain) { Name = "sosext-values-cctor", IsBackground = true }.Start();
            if (!s_moreReady.Wait(30_000)) throw new TimeoutException("a morewaits thread did not block");
            Console.Out.WriteLine($"SOSEXT-MORE {s_nestedTid} {s_callbackTid} {s_cctorTid}");
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void NestedThreadMain()
        {
            s_nestedTid = Mem.CurrentOsTid();
            try
            {
                NestedOuter();
            }
            catch (StackValuesException)
            {
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void NestedOuter()
        {
            try
            {
                throw new StackValuesException("sosext outer exception");
            }
            finally
            {
                try
                {
                    throw new InvalidOperationException("sosext inner exception");
                }
                catch (InvalidOperationException inner)
                {
                    s_moreReady.Signal();
                    s_block.Wait();
                    GC.KeepAlive(inner);
                }
            }
        }

        [DllImport("libc", EntryPoint = "qsort")]
        private static extern unsafe void Qsort(void* items, nint count, nint size, delegate* unmanaged<void*, void*, int> compare);

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static unsafe void CallbackThreadMain()
        {
            s_callbackTid = Mem.CurrentOsTid();
            int* items = stackalloc int[2];
            items[0] = 2;
            items[1] = 1;
            Qsort(items, 2, sizeof(int), &CompareBlocking);
        }

        [UnmanagedCallersOnly]
        private static unsafe int CompareBlocking(void* a, void* b)
        {
            var held = new StackValuesItem(0xCB);
            s_moreReady.Signal();
            s_block.Wait();
            GC.KeepAlive(held);
            return *(int*)a - *(int*)b;
        }

        private static class SlowInit
        {
            public static readonly int Value = Init();

            [MethodImpl(MethodImplOptions.NoInlining)]
            private static int Init()
            {
                s_moreReady.Signal();
                s_block.Wait();
                return 42;
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void CctorThreadMain()
        {
            s_cctorTid = Mem.CurrentOsTid();
            GC.KeepAlive(SlowInit.Value);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void FinallyThreadMain()
        {
            s_finallyTid = Mem.CurrentOsTid();
            try
            {
                FinallyThrower();
            }
            catch (StackValuesException e)
            {
                GC.KeepAlive(e);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void FinallyThrower()
        {
            var e = new StackValuesException("sosext finally exception");
            try
            {
                throw e;
            }
            finally
            {
                s_filtered = e;
                s_inFinally.Set();
                s_block.Wait();
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void FilterThrowInner() => throw new StackValuesException("sosext filter exception");

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static double FpSpin(double scale, float factor)
        {
            double acc = 0;
            Volatile.Write(ref s_fpSpinning, 1);
            while (Volatile.Read(ref s_fpSpinning) != 0)
                acc = acc * scale + factor;
            return acc;
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void CrashThreadMain()
        {
            Console.Out.WriteLine("SOSEXT-CRASH " + Mem.CurrentOsTid());
            Console.Out.Flush();
            CrashOuter();
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void CrashOuter() => CrashInner();

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void CrashInner() => throw new StackValuesException(CrashMessage);
    }
}
