using System;
using System.Runtime.CompilerServices;
using System.Threading;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>Held only by a local of SourceInner: gcroot finds it from that frame.</summary>
    public sealed class SourceHeldItem
    {
        public long Marker = 0x50D1CE;
    }

    /// <summary>Thrown (and caught) by the `source` scenario at a known line.</summary>
    public sealed class SourceTestException : Exception
    {
        public SourceTestException(string message) : base(message) { }
    }

    /// <summary>
    /// `source`: frames at known source lines, for clrstack / pe -lines / ip2md.
    /// * "sosext-source" runs SourceThreadMain → SourceOuter → SourceInner, which blocks holding a
    ///   SourceHeldItem in a local only (a stack root of that frame, for gcroot). Each call
    ///   (and the blocking wait) shares its source line with a [CallerLineNumber] capture, so the
    ///   truth holds the exact line every frame stands on, and [CallerFilePath] the document path
    ///   the compiler wrote into the PDB.
    /// * "sosext-source-thrower" runs SourceThrowOuter → SourceThrowInner, which throws a
    ///   SourceTestException; the thread catches it, keeps it and waits inside the catch block (so
    ///   it stays the thread's current managed exception).
    /// The methods are not optimized (their calls map to their own lines exactly), except SourceMiddle,
    /// which checks the JIT's map of an optimized call site.
    /// </summary>
    internal sealed class SourceScenario : IScenario
    {
        public const string ExceptionMessage = "sosext source-line exception";

        private static readonly ManualResetEventSlim s_block = new ManualResetEventSlim(false, 0);
        private static readonly ManualResetEventSlim s_ready = new ManualResetEventSlim(false, 0);
        private static readonly ManualResetEventSlim s_throwerReady = new ManualResetEventSlim(false, 0);

        private static Thread s_thread, s_thrower;
        private static int s_tid, s_throwerTid;
        private static string s_file;
        private static int s_mainLine, s_outerLine, s_middleLine, s_innerLine, s_depth;
        private static int s_throwOuterLine, s_throwInnerLine, s_throwMainLine;
        private static SourceTestException s_exception;
        private static WeakReference s_held;  // not a root: the frame's local is the only one

        private static int Line([CallerLineNumber] int line = 0) => line;
        private static string File([CallerFilePath] string path = "") => path;

        public void Build(string[] args)
        {
            s_file = File();
            s_thread = new Thread(SourceThreadMain) { Name = "sosext-source", IsBackground = true };
            s_thread.Start();
            s_thrower = new Thread(SourceThrowerMain) { Name = "sosext-source-thrower", IsBackground = true };
            s_thrower.Start();
            foreach (ManualResetEventSlim e in new[] { s_ready, s_throwerReady })
                if (!e.Wait(30_000)) throw new TimeoutException("a source scenario thread did not start");
            if (s_exception == null) throw new InvalidOperationException("the source thrower caught nothing");
        }

        // Each line below that calls on holds its own line number: keep the capture and the call together.
        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void SourceThreadMain()
        {
            s_tid = Mem.CurrentOsTid();
            s_mainLine = Line(); SourceOuter(3);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void SourceOuter(int depth)
        {
            s_outerLine = Line(); SourceMiddle(depth + 1);
            GC.KeepAlive(depth);
        }

        // Optimized (the build's default): its call site must still map to its own line.
        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void SourceMiddle(int depth)
        {
            s_middleLine = Line(); SourceInner(depth + 1);
            s_depth = depth;
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void SourceInner(int depth)
        {
            var held = new SourceHeldItem();
            s_held = new WeakReference(held);
            s_innerLine = Line(); s_ready.Set(); s_block.Wait();
            GC.KeepAlive(held);
            GC.KeepAlive(depth);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        private static void SourceThrowerMain()
        {
            s_throwerTid = Mem.CurrentOsTid();
            try
            {
                s_throwMainLine = Line(); SourceThrowOuter();
            }
            catch (SourceTestException e)
            {
                s_exception = e;
                s_throwerReady.Set();
                s_block.Wait();
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void SourceThrowOuter()
        {
            s_throwOuterLine = Line(); SourceThrowInner();
            GC.KeepAlive(s_file);
        }

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void SourceThrowInner()
        {
            s_throwInnerLine = Line(); throw new SourceTestException(ExceptionMessage);
        }

        public void Settle(int attempt)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
        }

        public void WriteTruth(Json w)
        {
            foreach (Thread t in new[] { s_thread, s_thrower })
                for (int spins = 0; spins < 5000 && (t.ThreadState & System.Threading.ThreadState.WaitSleepJoin) == 0; spins++)
                    Thread.Sleep(1);
            string type = typeof(SourceScenario).FullName;
            w.Name("source").BeginObject();
            w.Prop("file", s_file);
            w.Prop("osTid", s_tid);
            w.PropHex("held", Mem.Addr(s_held.Target));
            // Innermost first, as clrstack prints them: method (without arguments) and line.
            w.Name("frames").BeginArray();
            foreach ((string m, int line) in new[] { ("SourceInner", s_innerLine), ("SourceMiddle", s_middleLine),
                                                     ("SourceOuter", s_outerLine), ("SourceThreadMain", s_mainLine) })
            {
                w.BeginObject();
                w.Prop("method", type + "." + m);
                w.Prop("line", line);
                w.EndObject();
            }
            w.EndArray();
            w.EndObject();

            w.Name("sourceException").BeginObject();
            w.PropHex("address", Mem.Addr(s_exception));
            w.Prop("osTid", s_throwerTid);
            w.Prop("type", typeof(SourceTestException).FullName);
            w.Name("frames").BeginArray();
            foreach ((string m, int line) in new[] { ("SourceThrowInner", s_throwInnerLine),
                                                     ("SourceThrowOuter", s_throwOuterLine),
                                                     ("SourceThrowerMain", s_throwMainLine) })
            {
                w.BeginObject();
                w.Prop("method", type + "." + m);
                w.Prop("line", line);
                w.EndObject();
            }
            w.EndArray();
            w.EndObject();
        }

        public bool OnCommand(string command) => false;
    }
}
