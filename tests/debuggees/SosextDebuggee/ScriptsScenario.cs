using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `sosscripts`: the situations SOS's own behavioural scripts look at, with their truth.
    /// * "sosext-scripts-symbols" runs SymbolsMain(string[]) → Foo1(int) → Foo2(int, string) →
    ///   Foo4(string dllPath), which holds a System.Type local (a RuntimeType), an int local
    ///   `length`, calls Stream.CopyTo and Type.get_Assembly (callvirt with class arguments and a
    ///   class result, for dumpil) and blocks; none is optimized, so every value lives in a slot.
    /// * A TaskCompletionSource&lt;int&gt;'s task awaited by three async methods, started in the
    ///   order ContinuationFirstAsync, ContinuationSecondAsync, ContinuationThirdAsync: the task's
    ///   continuation list holds their state machine boxes in that order (dumpasync).
    /// * A timer that never fires (timerinfo).
    /// * "sosext-scripts-pinvoke" blocks in libc's poll through a P/Invoke with SetLastError, which
    ///   the runtime calls through an IL stub (ILStubClass.IL_STUB_PInvoke) with an InlinedCallFrame.
    /// * The stdin command "overflow" recurses without end on a new thread: a stack overflow kills
    ///   the process (the runtime writes its crash dump when DOTNET_DbgEnableMiniDump is set).
    /// </summary>
    internal sealed class ScriptsScenario : IScenario
    {
        public const string DllPath = "sosext-13.dll";  // 13 characters: Foo4's `length` local
        public const int Foo1Arg = 0x5c;
        public const int TimerDueMs = 3_600_000;

        private static readonly ManualResetEventSlim s_block = new ManualResetEventSlim(false, 0);
        private static readonly ManualResetEventSlim s_ready = new ManualResetEventSlim(false, 0);
        private static readonly TaskCompletionSource<int> s_gate = new TaskCompletionSource<int>();
        private static Thread s_thread;
        private static int s_tid;
        private static StackFrame[] s_frames;
        private static int s_parkLine;
        private static string[] s_args;
        private static Type s_dllType;
        private static int s_length;
        private static Task<int>[] s_awaiting;
        private static Timer s_timer;
        private static int s_pinvokeTid;
        private static readonly ManualResetEventSlim s_pinvokeReady = new ManualResetEventSlim(false, 0);

        [DllImport("libc", EntryPoint = "poll", SetLastError = true)]
        internal static extern int PollForEver(IntPtr fds, ulong count, int timeoutMs);

        public void Build(string[] args)
        {
            s_awaiting = new[] { ContinuationFirstAsync(), ContinuationSecondAsync(), ContinuationThirdAsync() };
            s_timer = new Timer(_ => { }, null, TimerDueMs, Timeout.Infinite);
            s_thread = new Thread(() => SymbolsMain(new[] { "sosext", "scripts" })) { Name = "sosext-scripts-symbols", IsBackground = true };
            s_thread.Start();
            new Thread(PInvokeMain) { Name = "sosext-scripts-pinvoke", IsBackground = true }.Start();
            if (!s_ready.Wait(30_000) || !s_pinvokeReady.Wait(30_000)) throw new TimeoutException("a sosscripts thread did not start");
            Thread.Sleep(200);  // the P/Invoke thread from its signal into poll
        }

        // -- the SymbolTestApp-like chain -----------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void SymbolsMain(string[] args)
        {
            s_tid = Mem.CurrentOsTid();
            s_args = args;
            Foo1(Foo1Arg);
            GC.KeepAlive(args);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static int Foo1(int x)
        {
            return Foo2(x, string.Concat("sosext-", DllPath.Substring(7)));
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static int Foo2(int x, string dllPath)
        {
            Foo4(dllPath);
            return x + 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void Foo4(string dllPath)
        {
            Type dllType = typeof(ScriptsScenario);
            int length = dllPath.Length;
            var from = new MemoryStream(new byte[] { 1, 2, 3 });
            var to = new MemoryStream();
            from.CopyTo(to);
            Assembly assembly = dllType.Assembly;
            s_dllType = dllType;
            s_length = length;
            Park();
            GC.KeepAlive(assembly);
            GC.KeepAlive(dllType);
        }

        /// <summary>Records the caller's stack with lines (the caller's own line is where it calls
        /// Park), then waits for ever.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void Park()
        {
            s_frames = new StackTrace(1, true).GetFrames();
            s_parkLine = s_frames[0].GetFileLineNumber();
            s_ready.Set();
            s_block.Wait();
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void PInvokeMain()
        {
            s_pinvokeTid = Mem.CurrentOsTid();
            s_pinvokeReady.Set();
            PollForEver(IntPtr.Zero, 0, -1);
        }

        // -- dumpasync: one task, three continuations in order -----------------------------------------

        private static async Task<int> ContinuationFirstAsync() => await s_gate.Task + 1;

        private static async Task<int> ContinuationSecondAsync() => await s_gate.Task + 2;

        private static async Task<int> ContinuationThirdAsync() => await s_gate.Task + 3;

        // -- the stack overflow (stdin "overflow") -------------------------------------------------------

        public bool OnCommand(string command)
        {
            if (command != "overflow") return false;
            new Thread(OverflowMain) { Name = "sosext-scripts-overflow", IsBackground = true }.Start();
            return true;
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void OverflowMain()
        {
            Console.Out.WriteLine("SOSEXT-CRASH " + Mem.CurrentOsTid());
            Console.Out.Flush();
            Overflow(1);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static int Overflow(int depth) => Overflow(depth + 1) + depth;

        // -- truth --------------------------------------------------------------------------------------

        public void Settle(int attempt)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }

        private static string Name(MethodBase m) => m.DeclaringType.FullName + "." + m.Name;

        public void WriteTruth(Json w)
        {
            for (int spins = 0; spins < 5000 && (s_thread.ThreadState & System.Threading.ThreadState.WaitSleepJoin) == 0; spins++)
                Thread.Sleep(1);
            w.Name("scripts").BeginObject();
            w.Prop("osTid", s_tid);
            w.Prop("parkLine", s_parkLine);
            w.Name("frames").BeginArray();
            foreach (StackFrame f in s_frames)
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
            w.Prop("dllPath", DllPath);
            w.Prop("length", s_length);
            w.Prop("dllTypeType", s_dllType.GetType().FullName);
            w.PropHex("dllType", Mem.Addr(s_dllType));
            w.PropHex("args", Mem.Addr(s_args));
            w.Prop("runtimeVersion", Environment.Version.ToString());
            w.Prop("gateTaskType", "System.Threading.Tasks.Task<System.Int32>");
            w.PropHex("gateTask", Mem.Addr(s_gate.Task));
            w.Name("continuations").BeginArray();
            foreach (Task<int> t in s_awaiting)
            {
                w.BeginObject();
                w.PropHex("address", Mem.Addr(t));
                w.PropHex("mt", t.GetType().TypeHandle.Value);
                w.EndObject();
            }
            w.EndArray();
            w.Name("continuationMethods").BeginArray();
            foreach (string m in new[] { "ContinuationFirstAsync", "ContinuationSecondAsync", "ContinuationThirdAsync" })
                w.Value(m);
            w.EndArray();
            w.PropHex("timer", Mem.Addr(s_timer));
            w.Prop("pinvokeTid", s_pinvokeTid);
            w.Prop("pinvokeMethod", typeof(ScriptsScenario).FullName + ".PollForEver");
            w.Prop("timerDueMs", TimerDueMs);
            w.EndObject();
        }
    }
}
