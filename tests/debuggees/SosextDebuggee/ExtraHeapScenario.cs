using System;
using System.Collections.Generic;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Runtime.Loader;
using System.Threading;
using System.Threading.Tasks;

namespace SosextDebuggee
{
    // Types only this scenario allocates.
    internal class ExtraAppException : InvalidOperationException
    {
        public ExtraAppException(string message) : base(message) { }
    }

    internal sealed class ExtraBareException : Exception
    {
        public ExtraBareException(string message) : base(message) { }
    }

    internal sealed class ExtraDelegateTarget
    {
        public int Calls;
        public void OnEvent(int x) => Calls += x;
        public void Second(int x) => Calls -= x;
        public static void StaticHandler(int x) => GC.KeepAlive(x);
    }

    internal sealed class ExtraNode
    {
        public ExtraNode Next;
        public object Payload;
        public string Name;
    }

    internal sealed class ExtraDeadItem { public int Id; }
    internal sealed class ExtraNativeHolder { public nint Block; }
    internal sealed class ExtraOldHolder { public object Young; }
    internal sealed class ExtraYoung { public object Large; }

    internal sealed class ExtraWorkTarget
    {
        public void RunTask() { }
        public void Callback(object state) { }
        public void RunLocal() { }
    }

    internal sealed class ExtraRawWorkItem : IThreadPoolWorkItem
    {
        public void Execute() { }
    }

    internal sealed class ExtraPluginContext : AssemblyLoadContext
    {
        public ExtraPluginContext() : base("sosext-plugin", isCollectible: false) { }
    }
}

namespace DebuggeeHost
{
    using SosextDebuggee;

    /// <summary>
    /// `extraheap`: the state of SOS's remaining heap-analysis commands, each part known exactly.
    /// * exceptions: one thrown and caught (it has a stack trace), one never thrown, one with a
    ///   null message, all rooted in statics, and one made after the last GC and dropped (dead);
    /// * delegates: a single-cast one on an instance method, a static-method one, and a multicast
    ///   one of two instance methods and a static method;
    /// * System.RuntimeType objects of known types (one a pointer type: a TypeDesc handle);
    /// * a chain of ExtraNode objects (A → B → C) with known fields, for dumpobjgcrefs and pathto;
    /// * thread-pool work items queued and never run: the pool's maximum is set to its minimum,
    ///   that many workers are blocked for good, and then a Task, a QueueUserWorkItem callback and a
    ///   raw IThreadPoolWorkItem go to the global queue and a Task to a blocked worker's local queue;
    /// * an object whose type comes from a second AssemblyLoadContext (this assembly loaded again);
    /// * a native block holding the addresses of live objects and of objects made after the last
    ///   GC and dropped (notreachableinrange lists exactly the latter);
    /// * a gen2 object referencing a gen0 one, and gen0 → LOH → gen0 references.
    /// </summary>
    internal sealed class ExtraHeapScenario : IScenario
    {
        public const int DeadCount = 3;
        private static ExtraAppException s_thrown;
        private static ExtraBareException s_nullMessage;
        private static ArgumentException s_plain;
        private static nint s_deadException;
        private static ExtraDelegateTarget s_target;
        private static Action<int> s_single, s_static, s_multi;
        private static Type[] s_types;
        private static ExtraNode s_a;
        private static int[] s_payload;
        private static ExtraWorkTarget s_work;
        private static Task s_globalTask, s_localTask;
        private static ExtraRawWorkItem s_raw;
        private static int s_blockers;
        private static readonly ManualResetEventSlim s_never = new ManualResetEventSlim(false, 0);
        private static readonly ManualResetEventSlim s_localQueued = new ManualResetEventSlim(false, 0);
        private static int s_started;
        private static ExtraPluginContext s_plugin;
        private static object s_pluginObject;
        private static nint s_block;
        private static nint[] s_deadItems = new nint[DeadCount];
        private static ExtraOldHolder s_old;
        private static object[] s_loh;
        private static ExtraYoung s_young;
        private static ExtraNativeHolder s_nativeHolder;

        public const int OomChunk = 1 << 20;
        private static long s_oomAllocated = -1, s_gcsAtOom = -1;

        public void Build(string[] args)
        {
            if (Array.IndexOf(args, "oom") >= 0) RunOutOfMemory();
            try { Throw("thrown once"); }
            catch (ExtraAppException e) { s_thrown = e; }
            s_plain = new ArgumentException("never thrown");
            s_nullMessage = new ExtraBareException(null);

            s_target = new ExtraDelegateTarget();
            s_single = s_target.OnEvent;
            s_static = ExtraDelegateTarget.StaticHandler;
            s_multi = s_target.OnEvent;
            s_multi += s_target.Second;
            s_multi += ExtraDelegateTarget.StaticHandler;

            s_types = new[] { typeof(ExtraNode), typeof(ExtraDeadItem), typeof(int*) };

            s_payload = new[] { 1, 2, 3 };
            s_a = new ExtraNode { Name = "node-a", Payload = s_payload };
            s_a.Next = new ExtraNode { Name = "node-b", Payload = "payload-b" };
            s_a.Next.Next = new ExtraNode { Name = "node-c" };

            s_plugin = new ExtraPluginContext();
            Assembly again = s_plugin.LoadFromAssemblyPath(typeof(ExtraHeapScenario).Assembly.Location);
            s_pluginObject = again.CreateInstance(typeof(ExtraDeadItem).FullName);
            GC.KeepAlive(AssemblyLoadContext.Default);

            s_old = new ExtraOldHolder();
            s_loh = new object[20_000];
            s_block = Marshal.AllocHGlobal(8 * (DeadCount + 2));
            s_nativeHolder = new ExtraNativeHolder { Block = s_block };

            s_work = new ExtraWorkTarget();
            BlockThePool();
        }

        /// <summary>`extraheap oom` (run with a GC heap hard limit): allocate 1 MiB arrays until the
        /// GC refuses one, then let them all go. The GC keeps a record of that failure.</summary>
        private static void RunOutOfMemory()
        {
            var keep = new List<byte[]>();
            try
            {
                while (keep.Count < 1 << 16) keep.Add(new byte[OomChunk]);
            }
            catch (OutOfMemoryException)
            {
                s_oomAllocated = keep.Count;
                s_gcsAtOom = GC.CollectionCount(0);
            }
            keep = null;
            GC.KeepAlive(keep);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void Throw(string message) => throw new ExtraAppException(message);

        /// <summary>No worker may run what is queued next: the pool may not grow past its minimum,
        /// and every worker it has waits forever. One of them first queues a Task to its own local
        /// queue.</summary>
        private static void BlockThePool()
        {
            ThreadPool.GetMinThreads(out int minWorkers, out int minIo);
            if (!ThreadPool.SetMaxThreads(minWorkers, minIo))
                throw new InvalidOperationException($"cannot limit the thread pool to {minWorkers} workers");
            s_blockers = minWorkers;
            for (int i = 0; i < s_blockers; i++)
            {
                bool first = i == 0;
                ThreadPool.UnsafeQueueUserWorkItem(_ => Block(first), null);
            }
            if (!s_localQueued.Wait(30_000))
                throw new TimeoutException("the thread pool's workers did not all start");
            s_globalTask = Task.Factory.StartNew(s_work.RunTask);
            ThreadPool.QueueUserWorkItem(s_work.Callback, null);
            s_raw = new ExtraRawWorkItem();
            ThreadPool.UnsafeQueueUserWorkItem(s_raw, preferLocal: false);
        }

        private static void Block(bool queueLocal)
        {
            // Every worker waits here until all have started, so none is free to take (or steal) the
            // local item queued below.
            Interlocked.Increment(ref s_started);
            SpinWait.SpinUntil(() => Volatile.Read(ref s_started) >= s_blockers);
            if (queueLocal)
            {
                s_localTask = Task.Factory.StartNew(s_work.RunLocal);
                s_localQueued.Set();
            }
            s_never.Wait();
        }

        public void Settle(int attempt)
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            GC.Collect();
            // Made after the last GC and referenced from nothing the GC sees: dead, but still there.
            MakeDead();
            s_young = new ExtraYoung { Large = s_loh };
            s_old.Young = s_young;
            s_loh[0] = s_young;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static unsafe void MakeDead()
        {
            nint* block = (nint*)s_block;
            block[0] = Mem.Addr(s_a);
            for (int i = 0; i < DeadCount; i++)
            {
                s_deadItems[i] = Mem.Addr(new ExtraDeadItem { Id = i });
                block[i + 1] = s_deadItems[i];
            }
            block[DeadCount + 1] = Mem.Addr(s_payload);
            s_deadException = Mem.Addr(new ExtraAppException("dead one"));
        }

        public bool OnCommand(string command) => false;

        private static void WriteException(Json w, object e, string message, bool thrown)
        {
            w.BeginObject();
            w.PropHex("address", Mem.Addr(e));
            w.PropHex("mt", Mem.MethodTableOf(e));
            w.Prop("type", e.GetType().FullName);
            w.Prop("message", message);
            w.Prop("thrown", thrown);
            w.EndObject();
        }

        private static void WriteCall(Json w, object target, MethodInfo m)
        {
            w.BeginObject();
            w.PropHex("target", Mem.Addr(target));
            w.Prop("method", m.DeclaringType.FullName + "." + m.Name);
            w.EndObject();
        }

        private static void WriteRef(Json w, string field, long offset, object value)
        {
            w.BeginObject();
            w.Prop("field", field);
            w.Prop("offset", offset);
            w.PropHex("object", Mem.Addr(value));
            w.Prop("type", value.GetType().FullName);
            w.EndObject();
        }

        public void WriteTruth(Json w)
        {
            w.Name("extraheap").BeginObject();

            w.Name("exceptions").BeginArray();
            WriteException(w, s_thrown, "thrown once", true);
            WriteException(w, s_plain, "never thrown", false);
            WriteException(w, s_nullMessage, null, false);
            w.EndArray();
            w.PropHex("deadException", s_deadException);
            w.Prop("throwMethod", typeof(ExtraHeapScenario).FullName + "." + nameof(Throw));

            w.Name("delegates").BeginObject();
            w.PropHex("single", Mem.Addr(s_single));
            w.PropHex("static", Mem.Addr(s_static));
            w.PropHex("multi", Mem.Addr(s_multi));
            w.Prop("delegateType", s_single.GetType().ToString());
            MethodInfo onEvent = typeof(ExtraDelegateTarget).GetMethod(nameof(ExtraDelegateTarget.OnEvent));
            MethodInfo second = typeof(ExtraDelegateTarget).GetMethod(nameof(ExtraDelegateTarget.Second));
            MethodInfo handler = typeof(ExtraDelegateTarget).GetMethod(nameof(ExtraDelegateTarget.StaticHandler));
            w.Name("singleCalls").BeginArray();
            WriteCall(w, s_target, onEvent);
            w.EndArray();
            // A static method's delegate has itself as its target.
            w.Name("staticCalls").BeginArray();
            WriteCall(w, s_static, handler);
            w.EndArray();
            Delegate[] list = s_multi.GetInvocationList();
            w.Name("multiCalls").BeginArray();
            WriteCall(w, s_target, onEvent);
            WriteCall(w, s_target, second);
            WriteCall(w, list[2], handler);
            w.EndArray();
            w.EndObject();

            w.Name("runtimeTypes").BeginArray();
            foreach (Type t in s_types)
            {
                w.BeginObject();
                w.PropHex("address", Mem.Addr(t));
                w.PropHex("handle", t.TypeHandle.Value);
                w.Prop("name", t.IsPointer ? null : t.FullName);
                w.EndObject();
            }
            w.EndArray();

            ExtraNode b = s_a.Next, c = b.Next;
            w.Name("nodes").BeginObject();
            w.PropHex("a", Mem.Addr(s_a));
            w.PropHex("b", Mem.Addr(b));
            w.PropHex("c", Mem.Addr(c));
            w.Prop("type", typeof(ExtraNode).FullName);
            w.Name("aRefs").BeginArray();
            WriteRef(w, "Next", Mem.FieldOffset(s_a, ref s_a.Next), b);
            WriteRef(w, "Payload", Mem.FieldOffset(s_a, ref s_a.Payload), s_payload);
            WriteRef(w, "Name", Mem.FieldOffset(s_a, ref s_a.Name), s_a.Name);
            w.EndArray();
            w.EndObject();

            w.Name("threadPool").BeginObject();
            w.Prop("blockedWorkers", s_blockers);
            w.PropHex("globalTask", Mem.Addr(s_globalTask));
            w.PropHex("localTask", Mem.Addr(s_localTask));
            w.PropHex("raw", Mem.Addr(s_raw));
            w.Prop("rawType", typeof(ExtraRawWorkItem).FullName);
            w.Prop("taskMethod", typeof(ExtraWorkTarget).FullName + "." + nameof(ExtraWorkTarget.RunTask));
            w.Prop("localMethod", typeof(ExtraWorkTarget).FullName + "." + nameof(ExtraWorkTarget.RunLocal));
            w.Prop("workMethod", typeof(ExtraWorkTarget).FullName + "." + nameof(ExtraWorkTarget.Callback));
            w.EndObject();

            w.Name("alc").BeginObject();
            w.PropHex("pluginObject", Mem.Addr(s_pluginObject));
            w.PropHex("plugin", Mem.Addr(s_plugin));
            w.Prop("pluginType", typeof(ExtraPluginContext).FullName);
            w.PropHex("default", Mem.Addr(AssemblyLoadContext.Default));
            w.Prop("defaultType", AssemblyLoadContext.Default.GetType().FullName);
            w.EndObject();

            w.Name("oom").BeginObject();
            w.Prop("arraysBeforeFailure", s_oomAllocated);
            w.Prop("gcsAtFailure", s_gcsAtOom);
            w.Prop("arraySize", Mem.UnalignedSizeOf(new byte[0]) + OomChunk);
            w.EndObject();

            w.Name("module").BeginObject();
            w.Prop("path", typeof(ExtraHeapScenario).Assembly.Location);
            // Where the file is mapped from its start (the loader maps an assembly flat and as an image).
            w.Name("mappedAt").BeginArray();
            foreach (string line in System.IO.File.ReadAllLines("/proc/self/maps"))
            {
                string[] f = line.Split(' ', 6, StringSplitOptions.RemoveEmptyEntries);
                if (f.Length == 6 && f[5] == typeof(ExtraHeapScenario).Assembly.Location && Convert.ToInt64(f[2], 16) == 0)
                    w.Hex((nint)Convert.ToInt64(f[0].Split('-')[0], 16));
            }
            w.EndArray();
            w.Prop("assemblyName", typeof(ExtraHeapScenario).Assembly.GetName().Name);
            w.Prop("fileVersion", System.Diagnostics.FileVersionInfo.GetVersionInfo(typeof(ExtraHeapScenario).Assembly.Location).FileVersion);
            w.EndObject();

            w.Name("appDomain").BeginObject();
            w.Prop("name", AppDomain.CurrentDomain.FriendlyName);
            w.Prop("id", AppDomain.CurrentDomain.Id);
            w.EndObject();

            w.Name("range").BeginObject();
            w.PropHex("start", s_block);
            w.PropHex("end", s_block + 8 * (DeadCount + 2));
            w.Name("dead").BeginArray();
            foreach (nint d in s_deadItems) w.Hex(d);
            w.EndArray();
            w.Prop("deadType", typeof(ExtraDeadItem).FullName);
            w.PropHex("holder", Mem.Addr(s_nativeHolder));
            w.Prop("holderType", typeof(ExtraNativeHolder).FullName);
            w.EndObject();

            w.Name("generations").BeginObject();
            w.PropHex("old", Mem.Addr(s_old));
            w.Prop("oldGeneration", GC.GetGeneration(s_old));
            w.PropHex("young", Mem.Addr(s_young));
            w.Prop("youngGeneration", GC.GetGeneration(s_young));
            w.Prop("youngSize", Mem.SizeOf(s_young));
            w.PropHex("loh", Mem.Addr(s_loh));
            w.Prop("lohGeneration", GC.GetGeneration(s_loh));
            w.Prop("oldType", typeof(ExtraOldHolder).FullName);
            w.Prop("youngType", typeof(ExtraYoung).FullName);
            w.EndObject();

            w.EndObject();
        }
    }
}
