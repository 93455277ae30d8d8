using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `crash`: the situations SOS's stack and exception checks look at, each on its own thread,
    /// blocked where a debugger can see it (live and in any dump):
    /// * "divzero": CrashDivMain → DivF2 → DivF3 → DivideByZero divides an int by zero; the
    ///   DivideByZeroException (a hardware fault turned managed) is caught in CrashDivMain, which
    ///   waits inside the catch block (so it stays the thread's current exception).
    /// * "simple": SimpleMain → UseObject throws an InvalidOperationException, caught and kept likewise.
    /// * "nested": NestedMain catches a FormatException (thrown by NestedInner) and, inside that
    ///   catch block, catches an InvalidOperationException wrapping it (thrown by NestedOuter) and
    ///   waits there: two exceptions in flight on one thread (pe -nested).
    /// * "task": TaskMain waits on a task whose body (TaskBody) catches an InvalidOperationException
    ///   from TaskInner and throws a FormatException wrapping it; Task.Wait throws the
    ///   AggregateException, caught and kept while the thread waits.
    /// * "async": AsyncThreadMain runs the async method RunAsync, which blocks before its first
    ///   await, inside its state machine's MoveNext (a frame whose type name holds angle brackets).
    /// * "deep": Recurse calls itself RecursionDepth times, then blocks (clrstack -c N).
    /// Every stack is the debuggee's own System.Diagnostics.StackTrace (method and line, innermost
    /// first), taken on the very line where the thread blocks or from the exception itself.
    /// The stdin command "divzero" divides by zero on a new thread with no handler: the process dies
    /// (the runtime writes its crash dump when DOTNET_DbgEnableMiniDump is set).
    /// </summary>
    internal sealed class CrashScenario : IScenario
    {
        public const int RecursionDepth = 24;
        public const string SimpleMessage = "sosext simple throw";
        public const string NestedInnerMessage = "sosext nested inner format";
        public const string NestedOuterMessage = "sosext nested outer operation";
        public const string TaskInnerMessage = "sosext task inner operation";
        public const string TaskOuterMessage = "sosext task outer format";

        private static readonly ManualResetEventSlim s_block = new ManualResetEventSlim(false, 0);
        private static readonly CountdownEvent s_ready = new CountdownEvent(6);
        private static readonly List<Thread> s_threads = new();

        private sealed class Site
        {
            public int Tid;
            public StackFrame[] Frames;
            public int ParkLine;
            public Exception Exception;
        }

        private static readonly Dictionary<string, Site> s_sites = new();
        private static int s_zero;  // a field, so the JIT cannot fold the division

        public void Build(string[] args)
        {
            Start("divzero", CrashDivMain);
            Start("simple", SimpleMain);
            Start("nested", NestedMain);
            Start("task", TaskMain);
            Start("async", AsyncThreadMain);
            Start("deep", () => Recurse(RecursionDepth));
            if (!s_ready.Wait(30_000)) throw new TimeoutException("a crash-scenario thread did not start");
        }

        private static void Start(string key, ThreadStart body)
        {
            lock (s_sites) s_sites[key] = new Site();
            var t = new Thread(body) { Name = "sosext-crash-" + key, IsBackground = true };
            s_threads.Add(t);
            t.Start();
        }

        /// <summary>Records the caller's stack (from its own frame, with lines) and exception, then
        /// waits for ever. In a catch block the StackTrace names the method at its try, not at the
        /// handler's call: the caller's line number says where the handler calls Park.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void Park(string key, Exception e = null, [CallerLineNumber] int line = 0)
        {
            Site s = s_sites[key];
            s.ParkLine = line;
            s.Tid = Mem.CurrentOsTid();
            s.Frames = new StackTrace(1, true).GetFrames();
            s.Exception = e;
            s_ready.Signal();
            s_block.Wait();
        }

        // -- divide by zero -----------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void CrashDivMain()
        {
            try
            {
                DivF2(7);
            }
            catch (DivideByZeroException e)
            {
                Park("divzero", e);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static int DivF2(int n) => DivF3(n + 1) + 1;

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static int DivF3(int n) => DivideByZero(n * 2) + 1;

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static int DivideByZero(int n)
        {
            return n / s_zero;
        }

        // -- a simple throw -------------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void SimpleMain()
        {
            try
            {
                UseObject();
            }
            catch (InvalidOperationException e)
            {
                Park("simple", e);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void UseObject() => throw new InvalidOperationException(SimpleMessage);

        // -- nested exceptions ------------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void NestedMain()
        {
            try
            {
                NestedInner();
            }
            catch (FormatException inner)
            {
                try
                {
                    NestedOuter(inner);
                }
                catch (InvalidOperationException outer)
                {
                    Park("nested", outer);
                }
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void NestedInner() => throw new FormatException(NestedInnerMessage);

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void NestedOuter(Exception inner) => throw new InvalidOperationException(NestedOuterMessage, inner);

        // -- a task's nested exception ------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void TaskMain()
        {
            try
            {
                TaskWait(Task.Run(TaskBody));
            }
            catch (AggregateException e)
            {
                Park("task", e);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void TaskWait(Task t) => t.Wait();

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void TaskBody()
        {
            try
            {
                TaskInner();
            }
            catch (InvalidOperationException e)
            {
                throw new FormatException(TaskOuterMessage, e);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void TaskInner() => throw new InvalidOperationException(TaskInnerMessage);

        // -- async --------------------------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void AsyncThreadMain() => RunAsync().GetAwaiter().GetResult();

        private static async Task RunAsync()
        {
            Park("async");
            await Task.Yield();
        }

        // -- deep recursion -------------------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void Recurse(int depth)
        {
            if (depth == 0)
                Park("deep");
            else
                Recurse(depth - 1);
        }

        // -- the crash (stdin "divzero") -----------------------------------------------------------------

        public bool OnCommand(string command)
        {
            if (command != "divzero") return false;
            new Thread(CrashDivUnhandled) { Name = "sosext-crash-unhandled", IsBackground = true }.Start();
            return true;
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void CrashDivUnhandled()
        {
            Console.Out.WriteLine("SOSEXT-CRASH " + Mem.CurrentOsTid());
            Console.Out.Flush();
            DivF2(11);
        }

        // -- truth ----------------------------------------------------------------------------------------

        public void Settle(int attempt)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }

        private static string Name(MethodBase m) => m.DeclaringType.FullName + "." + m.Name;

        internal static void WriteFrames(Json w, string name, StackFrame[] frames)
        {
            w.Name(name).BeginArray();
            foreach (StackFrame f in frames ?? Array.Empty<StackFrame>())
            {
                MethodBase m = f.GetMethod();
                if (m == null) continue;
                w.BeginObject();
                w.Prop("method", Name(m));
                w.Prop("module", m.Module.Name);
                w.Prop("line", f.GetFileLineNumber());
                w.Prop("file", f.GetFileName() ?? "");
                w.EndObject();
            }
            w.EndArray();
        }

        internal static void WriteException(Json w, Exception e)
        {
            w.BeginObject();
            w.PropHex("address", Mem.Addr(e));
            w.Prop("type", e.GetType().FullName);
            w.Prop("message", e.Message);
            // The field itself: AggregateException.Message appends its inner messages, SOS prints _message.
            w.Prop("rawMessage", (string)typeof(Exception).GetField("_message", BindingFlags.NonPublic | BindingFlags.Instance).GetValue(e));
            w.Prop("hresult", (long)unchecked((uint)e.HResult));
            WriteFrames(w, "frames", new StackTrace(e, true).GetFrames());
            w.Name("inner");
            if (e.InnerException == null) w.Null();
            else WriteException(w, e.InnerException);
            w.EndObject();
        }

        public void WriteTruth(Json w)
        {
            foreach (Thread t in s_threads)
                for (int spins = 0; spins < 5000 && (t.ThreadState & System.Threading.ThreadState.WaitSleepJoin) == 0; spins++)
                    Thread.Sleep(1);
            w.Name("crash").BeginObject();
            w.Prop("recursionDepth", RecursionDepth);
            foreach ((string key, Site s) in s_sites)
            {
                w.Name(key).BeginObject();
                w.Prop("osTid", s.Tid);
                w.Prop("parkLine", s.ParkLine);
                WriteFrames(w, "frames", s.Frames);
                w.Name("exception");
                if (s.Exception == null) w.Null();
                else WriteException(w, s.Exception);
                w.EndObject();
            }
            w.EndObject();
        }
    }
}
