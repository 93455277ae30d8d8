using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Threading;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `threads`: threads with known stacks, arguments, locals and a caught exception.
    /// * "sosext-named" runs NamedThreadMain → Level1(42, text) → Level2(item) → Level3(), which holds a
    ///   ThreadsLocalItem in a local and blocks. The Level methods are compiled without optimization so
    ///   that their arguments and locals live in stack slots the DAC can describe.
    /// * "sosext-thrower" runs ThrowOuter → ThrowMiddle → ThrowInner, which throws a TestException
    ///   (with an InnerTestException); ThrowerThreadMain catches it, keeps it in a static and blocks
    ///   inside its catch block.
    /// * one thread-pool work item blocks, so the pool has a running worker; waves of short work items
    ///   before that make the pool's hill climbing log a few steps (threadpool -ti).
    /// The truth names the threads' OS and managed ids, the frames' methods, the argument values and
    /// the exception's type, message, HResult, inner exception and stack-trace methods.
    /// </summary>
    internal sealed class ThreadsScenario : IScenario
    {
        public const int Level1Count = 42;
        public const long LocalMarker = 0x5A5A5A5A5AL;
        public const int Level3Rounds = 7;
        public const string ExceptionMessage = "sosext test exception: the thrower threw on purpose";
        public const string InnerMessage = "sosext inner exception message";

        private static readonly ManualResetEventSlim s_block = new ManualResetEventSlim(false, 0);
        private static readonly ManualResetEventSlim s_namedReady = new ManualResetEventSlim(false, 0);
        private static readonly ManualResetEventSlim s_throwerReady = new ManualResetEventSlim(false, 0);
        private static readonly ManualResetEventSlim s_poolReady = new ManualResetEventSlim(false, 0);

        private static Thread s_named, s_thrower, s_pool;
        private static int s_namedTid, s_throwerTid, s_poolTid;

        // The same objects the named thread's frames hold, for the truth (read on the main thread).
        private static string s_text;
        private static ThreadsArgItem s_item;
        private static ThreadsLocalItem s_local;
        private static int s_rounds;

        private static TestException s_exception;
        private static NotAnException s_notException;

        public void Build(string[] args)
        {
            s_notException = new NotAnException();

            s_named = new Thread(NamedThreadMain) { Name = "sosext-named", IsBackground = true };
            s_named.Start();
            s_thrower = new Thread(ThrowerThreadMain) { Name = "sosext-thrower", IsBackground = true };
            s_thrower.Start();
            ThreadPool.UnsafeQueueUserWorkItem(PoolWorkItem, null);

            foreach (ManualResetEventSlim e in new[] { s_namedReady, s_throwerReady, s_poolReady })
                if (!e.Wait(30_000)) throw new TimeoutException("a scenario thread did not start");
            if (s_exception == null) throw new InvalidOperationException("the thrower thread caught nothing");
            ExerciseHillClimbing();
        }

        private const BindingFlags AnyMember = BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static | BindingFlags.Instance;
        private static readonly Type s_hillClimbing =
            typeof(ThreadPool).Assembly.GetType("System.Threading.PortableThreadPool+HillClimbing");

        // Short work items in waves until the pool's hill climbing has logged a few steps (at most
        // 5 s), so threadpool -ti has a log to show.
        private static void ExerciseHillClimbing()
        {
            object climber = s_hillClimbing?.GetField("ThreadPoolHillClimber", AnyMember)?.GetValue(null);
            FieldInfo logSize = s_hillClimbing?.GetField("_logSize", AnyMember);
            if (climber == null || logSize == null) return;
            var watch = Stopwatch.StartNew();
            while ((int)logSize.GetValue(climber) < 4 && watch.ElapsedMilliseconds < 5000)
            {
                using var wave = new CountdownEvent(32);
                for (int i = 0; i < 32; i++)
                    ThreadPool.UnsafeQueueUserWorkItem(_ => { Thread.SpinWait(20_000); wave.Signal(); }, null);
                wave.Wait();
            }
        }

        // -- the named thread ------------------------------------------------------------------------

        // Not optimized: its call to Level1 is in tail position and would become a tail call.
        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void NamedThreadMain()
        {
            s_namedTid = Mem.CurrentOsTid();
            Level1(Level1Count, string.Concat("sosext-", "level1-text"));
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void Level1(int count, string text)
        {
            var item = new ThreadsArgItem(count);
            s_text = text;
            s_item = item;
            Level2(item);
            GC.KeepAlive(text);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void Level2(object item)
        {
            Level3();
            GC.KeepAlive(item);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void Level3()
        {
            // Release builds keep single-use values on the IL stack; taking the local's address and
            // counting in a loop make both real IL locals, which is what the runtime can report.
            var local = new ThreadsLocalItem(LocalMarker);
            int rounds = Level3Rounds;
            s_local = local;
            Touch(ref local);
            s_namedReady.Set();
            while (!s_block.Wait(Timeout.Infinite)) rounds++; // never set: the thread stays here
            s_rounds = rounds;
            GC.KeepAlive(local);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void Touch(ref ThreadsLocalItem item) => item.Marker |= 0;

        // -- the thrower thread ----------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void ThrowerThreadMain()
        {
            s_throwerTid = Mem.CurrentOsTid();
            try
            {
                ThrowOuter();
            }
            catch (TestException e)
            {
                // Wait inside the handler: the runtime forgets a thread's last thrown exception
                // once its catch block is left, and `pe` without an address shows that exception.
                s_exception = e;
                s_throwerReady.Set();
                s_block.Wait();
            }
        }

        // Not optimized: an optimized call in tail position may become a tail call and drop a frame.
        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void ThrowOuter() => ThrowMiddle();

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void ThrowMiddle() => ThrowInner();

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void ThrowInner() =>
            throw new TestException(ExceptionMessage, new InnerTestException(InnerMessage));

        // -- the pool work item ----------------------------------------------------------------------

        private static void PoolWorkItem(object state)
        {
            s_poolTid = Mem.CurrentOsTid();
            s_pool = Thread.CurrentThread;
            s_poolReady.Set();
            s_block.Wait();
        }

        // -- the protocol ----------------------------------------------------------------------------

        public void Settle(int attempt)
        {
            // Everything the truth names is old by now: two full GCs move it to gen2 once and for all.
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }

        private static void WaitForBlocked()
        {
            foreach (Thread t in new[] { s_named, s_thrower, s_pool })
                for (int spins = 0; spins < 5000 && (t.ThreadState & System.Threading.ThreadState.WaitSleepJoin) == 0; spins++)
                    Thread.Sleep(1);
        }

        private static string MethodName(MethodBase m) => m == null ? "?" : m.DeclaringType?.FullName + "." + m.Name;

        public void WriteTruth(Json w)
        {
            WaitForBlocked();

            w.Name("threads").BeginObject();
            void T(string role, Thread t, int tid)
            {
                w.Name(role).BeginObject();
                w.Prop("name", t.Name);
                w.Prop("managedId", t.ManagedThreadId);
                w.Prop("osTid", tid);
                w.Prop("isBackground", t.IsBackground);
                w.Prop("isThreadPoolThread", t.IsThreadPoolThread);
                w.EndObject();
            }
            T("named", s_named, s_namedTid);
            T("thrower", s_thrower, s_throwerTid);
            T("pool", s_pool, s_poolTid);
            T("main", Thread.CurrentThread, Mem.CurrentOsTid());
            w.EndObject();

            w.Name("named").BeginObject();
            // Innermost first, as clrstack prints them.
            w.Name("frames").BeginArray();
            foreach (string m in new[] { "Level3", "Level2", "Level1", "NamedThreadMain" })
                w.Value(typeof(ThreadsScenario).FullName + "." + m);
            w.EndArray();
            w.Prop("count", Level1Count);
            w.PropHex("text", Mem.Addr(s_text));
            w.Prop("textValue", s_text);
            w.PropHex("item", Mem.Addr(s_item));
            w.PropHex("local", Mem.Addr(s_local));
            w.PropHex("itemMt", typeof(ThreadsArgItem).TypeHandle.Value);
            w.PropHex("localMt", typeof(ThreadsLocalItem).TypeHandle.Value);
            w.Prop("localMarker", LocalMarker);
            w.Prop("level3Rounds", Level3Rounds);
            w.EndObject();

            TestException e = s_exception;
            w.Name("exception").BeginObject();
            w.PropHex("address", Mem.Addr(e));
            w.Prop("type", e.GetType().FullName);
            w.Prop("message", e.Message);
            w.Prop("hresult", Mem.Hex((nint)(uint)e.HResult));
            w.Name("inner").BeginObject();
            w.PropHex("address", Mem.Addr(e.InnerException));
            w.Prop("type", e.InnerException.GetType().FullName);
            w.Prop("message", e.InnerException.Message);
            w.EndObject();
            w.Name("stackTrace").BeginArray();
            foreach (StackFrame f in new StackTrace(e, false).GetFrames())
                w.Value(MethodName(f.GetMethod()));
            w.EndArray();
            w.EndObject();

            w.Name("notException").BeginObject();
            w.PropHex("address", Mem.Addr(s_notException));
            w.Prop("type", typeof(NotAnException).FullName);
            w.EndObject();

            ThreadPool.GetMinThreads(out int minWorkers, out int minIo);
            ThreadPool.GetMaxThreads(out int maxWorkers, out int maxIo);
            w.Name("threadPool").BeginObject();
            w.Prop("minWorkers", minWorkers);
            w.Prop("maxWorkers", maxWorkers);
            w.Prop("threadCount", ThreadPool.ThreadCount);
            WriteHillClimbingLog(w);
            w.EndObject();
            w.Prop("osThreadCount", Process.GetCurrentProcess().Threads.Count);
        }

        // The pool's hill climbing log as the pool itself holds it (PortableThreadPool+HillClimbing's
        // ThreadPoolHillClimber: the ring _log, its oldest entry _logStart, its count _logSize),
        // oldest first; read by reflection, so nothing of it is our own guess.
        private static void WriteHillClimbingLog(Json w)
        {
            const BindingFlags any = AnyMember;
            Type climbing = s_hillClimbing;
            object climber = climbing?.GetField("ThreadPoolHillClimber", any)?.GetValue(null);
            if (climber == null) return;
            int start = (int)climbing.GetField("_logStart", any).GetValue(climber);
            int size = (int)climbing.GetField("_logSize", any).GetValue(climber);
            Array log = (Array)climbing.GetField("_log", any).GetValue(climber);
            w.Name("hillClimbingLog").BeginArray();
            for (int i = 0; i < Math.Min(size, log.Length); i++)
            {
                object entry = log.GetValue((start + i) % log.Length);
                Type t = entry.GetType();
                w.BeginObject();
                w.Prop("tickCount", (int)t.GetField("tickCount", any).GetValue(entry));
                w.Prop("transition", t.GetField("stateOrTransition", any).GetValue(entry).ToString());
                w.Prop("newControlSetting", (int)t.GetField("newControlSetting", any).GetValue(entry));
                w.Prop("lastHistoryCount", (int)t.GetField("lastHistoryCount", any).GetValue(entry));
                w.EndObject();
            }
            w.EndArray();
        }

        public bool OnCommand(string command) => false;
    }
}
