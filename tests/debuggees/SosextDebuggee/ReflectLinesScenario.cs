using System;
using System.Collections.Generic;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Threading;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `reflectlines`: the situations of SOS's Reflection and LineNums scripts, each on its own
    /// thread, caught and kept as the thread's current exception while it waits:
    /// * "reflection": ReflectMain calls ReflectInvoked.ExceptionNoHandler through
    ///   MethodInfo.Invoke; the method throws System.Exception, which reflection wraps in a
    ///   TargetInvocationException (HResult 80131604) whose InnerException is the original.
    /// * "linenums": LineMain → LineFoo → LineBar, where LineBar throws inside `while (true)` and
    ///   LineFoo calls LineBar twice in a row (the first call's return address is the second
    ///   call's first instruction): the corner cases of SOS's LineNums debuggee, optimized code.
    /// The truth is each exception's type, message, HResult and `new StackTrace(e, true)` frames.
    /// The stdin commands "reflectcrash" and "linecrash" run the same methods on a new thread
    /// whose catch filter declines, so the exception goes unhandled from the same source lines and
    /// the process dies (the runtime writes its crash dump when DOTNET_DbgEnableMiniDump is set),
    /// as SOS's Reflection and LineNums debuggees do.
    /// </summary>
    internal sealed class ReflectLinesScenario : IScenario
    {
        public const string InvokedMessage = "sosext exception from ReflectInvoked.ExceptionNoHandler()";
        public const string LineMessage = "sosext this should be LineBar's throw line";

        private static readonly ManualResetEventSlim s_block = new ManualResetEventSlim(false, 0);
        private static readonly CountdownEvent s_ready = new CountdownEvent(2);
        private static readonly List<Thread> s_threads = new();
        private static readonly Dictionary<string, (int Tid, Exception Exception)> s_sites = new();

        public void Build(string[] args)
        {
            Start("reflection", () => ReflectMain(true));
            Start("linenums", () => LineMain(true));
            if (!s_ready.Wait(30_000)) throw new TimeoutException("a reflectlines thread did not start");
        }

        private static void Start(string key, ThreadStart body)
        {
            var t = new Thread(body) { Name = "sosext-reflectlines-" + key, IsBackground = true };
            s_threads.Add(t);
            t.Start();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void Park(string key, Exception e)
        {
            lock (s_sites) s_sites[key] = (Mem.CurrentOsTid(), e);
            s_ready.Signal();
            s_block.Wait();
        }

        // -- an exception thrown by a method invoked through reflection ------------------------------

        public sealed class ReflectInvoked
        {
            [MethodImpl(MethodImplOptions.NoInlining)]
            public string ExceptionNoHandler()
            {
                int i = Environment.ProcessorCount > 0 ? 1 : 0;
                if (i == 1)
                    throw new Exception(InvokedMessage);
                return "not reached";
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void ReflectMain(bool handle)
        {
            MethodInfo mi = typeof(ReflectInvoked).GetMethod(nameof(ReflectInvoked.ExceptionNoHandler));
            try
            {
                mi.Invoke(new ReflectInvoked(), null);
            }
            catch (TargetInvocationException e) when (handle)
            {
                Park("reflection", e);
            }
        }

        // -- LineNums' corner cases ------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void LineMain(bool handle)
        {
            try
            {
                LineFoo();
            }
            catch (Exception e) when (handle)
            {
                Park("linenums", e);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void LineFoo()
        {
            LineBar();
            LineBar();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void LineBar()
        {
            while (true)
            {
                throw new Exception(LineMessage);
            }
        }

        private static byte[] s_pinned;
        private static System.Runtime.InteropServices.GCHandle s_pin;

        public bool OnCommand(string command)
        {
            if (command == "pin")
            {
                // DumpGCData.script's debuggee between its two breaks: one pinned array, one GC.
                s_pinned = new byte[1024 * 1024];
                s_pin = System.Runtime.InteropServices.GCHandle.Alloc(s_pinned, System.Runtime.InteropServices.GCHandleType.Pinned);
                GC.Collect();
                Console.Out.WriteLine("SOSEXT-PINNED " + GC.CollectionCount(2));
                Console.Out.Flush();
                return true;
            }
            ThreadStart body = command switch
            {
                "reflectcrash" => () => ReflectMain(false),
                "linecrash" => () => LineMain(false),
                _ => null,
            };
            if (body == null) return false;
            new Thread(() => { AnnounceCrash(); body(); }) { Name = "sosext-reflectlines-" + command, IsBackground = true }.Start();
            return true;
        }

        private static void AnnounceCrash()
        {
            Console.Out.WriteLine("SOSEXT-CRASH " + Mem.CurrentOsTid());
            Console.Out.Flush();
        }

        public void Settle(int attempt)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }

        public void WriteTruth(Json w)
        {
            foreach (Thread t in s_threads)
                for (int spins = 0; spins < 5000 && (t.ThreadState & System.Threading.ThreadState.WaitSleepJoin) == 0; spins++)
                    Thread.Sleep(1);
            w.Name("reflectlines").BeginObject();
            foreach ((string key, (int tid, Exception e)) in s_sites)
            {
                w.Name(key).BeginObject();
                w.Prop("osTid", tid);
                w.Name("exception");
                CrashScenario.WriteException(w, e);
                w.EndObject();
            }
            w.EndObject();
        }
    }
}
