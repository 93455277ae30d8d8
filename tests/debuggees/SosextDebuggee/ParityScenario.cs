using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;

namespace SosextDebuggee
{
    // Types only this scenario allocates, so per-type counts on the heap are exactly the scenario's.
    internal sealed class ParityGenItem { public long Marker; }
    internal sealed class ParityLohItem { public int Value; }
    internal struct ParityPinnedValue { public long A, B; }
    internal sealed class ParityLockObject { public int Value; }
    internal sealed class ParityTimerState { public int Id; }
    internal sealed class ParityHandleTarget { public int Id; }
    /// <summary>Registered for finalization; which finalization-queue generation holds it is the GC's to say.</summary>
    internal sealed class ParityFinalizable { public int Id; ~ParityFinalizable() { Id = -1; } }
    internal sealed class ParityLeakedTarget { public int Id; }

    /// <summary>An awaiter that is never completed and keeps its continuation in a static: the
    /// state machine awaiting it is the top of its async stack (no task is awaited).</summary>
    internal readonly struct ParityAwaiter : INotifyCompletion
    {
        public static Action Stored;
        public readonly long Token;
        public ParityAwaiter(long token) { Token = token; }
        public bool IsCompleted => false;
        public void OnCompleted(Action continuation) => Stored = continuation;
        public void GetResult() { }
    }

    internal readonly struct ParityAwaitable
    {
        public ParityAwaiter GetAwaiter() => new ParityAwaiter(0x7E57);
    }

    /// <summary>Outer awaits Middle awaits Inner awaits a TaskCompletionSource that never completes;
    /// Lonely awaits a custom awaiter.</summary>
    internal static class ParityAsync
    {
        public static readonly TaskCompletionSource<int> Source = new TaskCompletionSource<int>();
        public static Task<int> Inner, Middle;
        public static Task Outer, Lonely;

        public static void Start()
        {
            Outer = OuterAsync();
            Lonely = LonelyAsync();
        }

        private static async Task<int> InnerAsync()
        {
            int v = await Source.Task;
            return v + 1;
        }

        private static async Task<int> MiddleAsync()
        {
            Inner = InnerAsync();
            int v = await Inner;
            return v * 2;
        }

        private static async Task OuterAsync()
        {
            Middle = MiddleAsync();
            int v = await Middle;
            GC.KeepAlive(v);
        }

        private static async Task LonelyAsync()
        {
            await new ParityAwaitable();
        }
    }

    /// <summary>A generic struct: for a reference type argument its methods run as code shared by
    /// every such instantiation (ParityHolder&lt;__Canon&gt;), which learns its exact type from a
    /// hidden MethodTable argument. Wait uses T after its wait, so the JIT keeps that argument in the
    /// stack slot the GC info names (the frame's generic context).</summary>
    internal struct ParityHolder<T> where T : class
    {
        public T Held;
        public int Waits;

        public ParityHolder(T held) { Held = held; Waits = 0; }

        // Everything is used after the wait, so the frame still holds it (`missing` is null: the
        // debugger API types a null by the declared type, !0).
        [MethodImpl(MethodImplOptions.NoInlining)]
        public void Wait(T item, T missing, ManualResetEventSlim never)
        {
            Waits++;
            never.Wait();
            Waits++;
            GC.KeepAlive(typeof(T));
            GC.KeepAlive(item);
            GC.KeepAlive(missing);
        }
    }

    /// <summary>An async method of a generic class, blocked before its first await: its frames are the
    /// kickoff method (context: `this`), AsyncTaskMethodBuilder.Start&lt;the state machine&gt; and the
    /// state machine's MoveNext, a struct's method shared by reference-type instantiations (as the
    /// accept loop of an ASP.NET server's socket thread is). Run on a thread of its own, called from
    /// a method with no variables (a caller's variable whose home ends at the call's return address
    /// is one the debugger API does not show, a rule of its own).</summary>
    internal sealed class ParityRunner<T> where T : class
    {
        private readonly T _item;

        public ParityRunner(T item) { _item = item; }

        public async Task RunAsync(ManualResetEventSlim never)
        {
            T seen = _item;
            never.Wait();
            await Task.Yield();
            GC.KeepAlive(seen);
            GC.KeepAlive(typeof(T));
        }
    }

    /// <summary>A shared generic method (Park&lt;__Canon&gt;): its hidden argument is the exact
    /// instantiated MethodDesc, which it needs after the call to find ParityHolder&lt;U&gt;[].</summary>
    internal static class ParityGeneric
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Park<U>(U value, U missing, ManualResetEventSlim never) where U : class
        {
            var holder = new ParityHolder<U>(value);
            holder.Wait(value, missing, never);
            GC.KeepAlive(typeof(ParityHolder<U>[]));
            GC.KeepAlive(holder.Held);
            GC.KeepAlive(value);
            GC.KeepAlive(missing);
        }
    }

    internal sealed class ParityTimerTarget
    {
        public int Ticks;
        public static int StaticTicks;
        public void OnTick(object state) => Interlocked.Increment(ref Ticks);
        // A static callback: the delegate's _methodPtr is a shuffle thunk, _methodPtrAux the method.
        public static void OnStaticTick(object state) => Interlocked.Increment(ref StaticTicks);
    }
}

namespace DebuggeeHost
{
    using SosextDebuggee;

    /// <summary>
    /// `parity`: the state SOS's leak-hunting commands report, each part known exactly.
    /// * objects of the scenario's own types in gen0, gen1 and gen2 (re-made at every settle), a
    ///   ParityLohItem[] on the LOH, a ParityPinnedValue[] on the POH, and byte arrays of an unusual
    ///   size in gen0 (for sizestats);
    /// * three System.Threading.Timer objects with long due times (they never fire while inspected)
    ///   and distinct periods, calling ParityTimerTarget.OnTick (the last the static OnStaticTick);
    /// * a Monitor held twice (recursion 2) by the thread "sosext-monitor" on an object that has a
    ///   hash code (so the lock lives in a sync block, not a thin lock), and a second object whose
    ///   sync block exists but whose lock was released;
    /// * two strong GC handles whose values sit in a static array, and three whose values are kept
    ///   only XOR-masked (so no memory holds them: leaked, as gchandleleaks should say);
    /// * a ConcurrentDictionary&lt;int, string&gt; and a ConcurrentDictionary&lt;string, bool&gt; of known contents.
    /// </summary>
    internal sealed class ParityScenario : IScenario
    {
        public const int Gen0Count = 10, Gen1Count = 3, Gen2Count = 5, OddArrays = 7, OddArrayLength = 7777;
        public static readonly (uint Due, uint Period)[] TimerTimes =
        {
            (3_600_000, 111_111), (3_700_000, 222_222), (3_800_000, uint.MaxValue),
        };

        private static List<ParityGenItem> s_gen0, s_gen1, s_gen2;
        private static ParityFinalizable s_finalOld, s_finalYoung;
        private static List<byte[]> s_odd;
        private static ParityLohItem[] s_loh;
        private static ParityPinnedValue[] s_pinned;
        private static Timer[] s_timers;
        private static ParityTimerState[] s_timerStates;
        private static ParityTimerTarget s_timerTarget;
        private static TimerCallback[] s_timerCallbacks;
        private static ParityLockObject s_held, s_released;
        private static ConcurrentDictionary<int, string> s_intDict;
        private static ConcurrentDictionary<string, bool> s_stringDict;
        private static ConcurrentDictionary<int, string[]> s_arrayDict;
        private static ConcurrentDictionary<long, ParityPinnedValue> s_structDict;
        private static ConcurrentDictionary<char, object> s_objectDict;
        private static ConcurrentQueue<int> s_intQueue;
        private static ConcurrentQueue<string> s_stringQueue;
        private static int s_monitorTid, s_genericTid, s_asyncTid;
        private static readonly ManualResetEventSlim s_genericReady = new ManualResetEventSlim(false, 0);
        private static readonly ManualResetEventSlim s_asyncReady = new ManualResetEventSlim(false, 0);
        private static Task s_asyncPending;
        private static nint[] s_keptHandles;
        private static nint s_monitorStackSlot, s_native;
        public const int NativeBlock = 3 << 20;
        private static long[] s_leakedHandlesMasked;
        private const long HandleMask = 0x5A5A5A5A5A5A5A5AL;
        private static readonly ManualResetEventSlim s_monitorReady = new ManualResetEventSlim(false, 0);
        private static readonly ManualResetEventSlim s_never = new ManualResetEventSlim(false, 0);

        public void Build(string[] args)
        {
            s_loh = new ParityLohItem[20_000];
            s_pinned = GC.AllocateArray<ParityPinnedValue>(64, pinned: true);

            s_timerTarget = new ParityTimerTarget();
            s_timers = new Timer[TimerTimes.Length];
            s_timerStates = new ParityTimerState[TimerTimes.Length];
            s_timerCallbacks = new TimerCallback[TimerTimes.Length];
            for (int i = 0; i < TimerTimes.Length; i++)
            {
                // The last timer has no state object: SOS prints a null state as 0 and "()".
                s_timerStates[i] = i < TimerTimes.Length - 1 ? new ParityTimerState { Id = i } : null;
                // ... and a static callback (as the bundled service's timer has).
                s_timerCallbacks[i] = i < TimerTimes.Length - 1 ? s_timerTarget.OnTick : ParityTimerTarget.OnStaticTick;
                s_timers[i] = new Timer(s_timerCallbacks[i], s_timerStates[i], TimerTimes[i].Due, TimerTimes[i].Period);
            }

            s_held = new ParityLockObject { Value = 1 };
            s_released = new ParityLockObject { Value = 2 };
            // A hash code in the header leaves no room for a thin lock: locking then makes a sync block.
            RuntimeHelpers.GetHashCode(s_held);
            RuntimeHelpers.GetHashCode(s_released);
            lock (s_released) { s_released.Value++; }
            var t = new Thread(MonitorBody) { Name = "sosext-monitor", IsBackground = true };
            t.Start();
            if (!s_monitorReady.Wait(30_000)) throw new TimeoutException("the monitor thread did not start");
            // A second thread waits for the held lock: MonitorHeld counts it (1 + 2 per waiter).
            var waiter = new Thread(() => { Monitor.Enter(s_held); }) { Name = "sosext-monitor-waiter", IsBackground = true };
            waiter.Start();
            for (int spins = 0; spins < 10_000 && (waiter.ThreadState & System.Threading.ThreadState.WaitSleepJoin) == 0; spins++)
                Thread.Sleep(1);
            Thread.Sleep(200); // past the spinning phase, into the wait

            // A thread blocked in shared generic code: ParityGeneric.Park<string> (a MethodDesc
            // context) calls ParityHolder<string>.Wait (a MethodTable context).
            // And one blocked inside ParityRunner<string>.RunAsync before its first await.
            var generic = new Thread(GenericBody) { Name = "sosext-generic", IsBackground = true };
            var async = new Thread(AsyncBody) { Name = "sosext-generic-async", IsBackground = true };
            generic.Start();
            async.Start();
            if (!s_genericReady.Wait(30_000) || !s_asyncReady.Wait(30_000))
                throw new TimeoutException("the generic threads did not start");
            foreach (Thread blocked in new[] { generic, async })
                for (int spins = 0; spins < 10_000 && (blocked.ThreadState & System.Threading.ThreadState.WaitSleepJoin) == 0; spins++)
                    Thread.Sleep(1);
            Thread.Sleep(200); // past ManualResetEventSlim's spinning, blocked in Wait

            s_keptHandles = new nint[2];
            for (int i = 0; i < s_keptHandles.Length; i++)
                s_keptHandles[i] = GCHandle.ToIntPtr(GCHandle.Alloc(new ParityHandleTarget { Id = i }, GCHandleType.Normal));
            s_leakedHandlesMasked = new long[3];
            LeakHandles();
            ScrubStack();

            ParityAsync.Start();
            unsafe { s_native = (nint)NativeMemory.Alloc(NativeBlock); }

            s_intDict = new ConcurrentDictionary<int, string>();
            for (int k = 1; k <= 5; k++) s_intDict[k * 11] = "value-" + k;
            s_stringDict = new ConcurrentDictionary<string, bool>();
            s_stringDict["yes"] = true;
            s_stringDict["no"] = false;
            s_arrayDict = new ConcurrentDictionary<int, string[]>();
            s_arrayDict[7] = new[] { "a", "b", "c", "d" };
            s_structDict = new ConcurrentDictionary<long, ParityPinnedValue>();
            s_structDict[-3] = new ParityPinnedValue { A = 5, B = 6 };
            s_objectDict = new ConcurrentDictionary<char, object>();
            s_objectDict['x'] = null;
            s_objectDict['y'] = s_held;
            // 40 in, 5 out: more than the first segment's 32 slots, so two segments (the first frozen).
            s_intQueue = new ConcurrentQueue<int>();
            for (int i = 0; i < 40; i++) s_intQueue.Enqueue(i * 3);
            for (int i = 0; i < 5; i++) s_intQueue.TryDequeue(out _);
            s_stringQueue = new ConcurrentQueue<string>();
            foreach (string q in new[] { "first", "second", "third" }) s_stringQueue.Enqueue(q);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void LeakHandles()
        {
            for (int i = 0; i < s_leakedHandlesMasked.Length; i++)
                s_leakedHandlesMasked[i] = (long)GCHandle.ToIntPtr(GCHandle.Alloc(new ParityLeakedTarget { Id = i })) ^ HandleMask;
        }

        // Overwrites the dead stack below this frame, where the handle allocation left copies of the values.
        [MethodImpl(MethodImplOptions.NoInlining)]
        private static int ScrubStack()
        {
            Span<byte> scratch = stackalloc byte[512 * 1024];
            scratch.Clear();
            return scratch[scratch.Length - 1];
        }

        private static unsafe void MonitorBody()
        {
            long onStack = 0x57AC;
            s_monitorStackSlot = (nint)(&onStack);
            Monitor.Enter(s_held);
            Monitor.Enter(s_held);
            s_monitorTid = Mem.CurrentOsTid();
            s_monitorReady.Set();
            s_never.Wait();
            GC.KeepAlive(onStack);
        }

        private static void GenericBody()
        {
            s_genericTid = Mem.CurrentOsTid();
            s_genericReady.Set();
            ParityGeneric.Park<string>("parked", null, s_never);
        }

        private static void AsyncBody()
        {
            s_asyncTid = Mem.CurrentOsTid();
            s_asyncReady.Set();
            s_asyncPending = new ParityRunner<string>("run").RunAsync(s_never);
        }

        public void Settle(int attempt)
        {
            s_gen0 = s_gen1 = s_gen2 = null;
            s_odd = null;
            s_gen2 = Make(Gen2Count, 2);
            s_finalOld = new ParityFinalizable { Id = 2 };
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            GC.Collect();
            s_gen1 = Make(Gen1Count, 1);
            GC.Collect(0);
            s_gen0 = Make(Gen0Count, 0);
            s_finalYoung = new ParityFinalizable { Id = 0 };
            s_odd = new List<byte[]>();
            for (int i = 0; i < OddArrays; i++) s_odd.Add(new byte[OddArrayLength]);
        }

        private static List<ParityGenItem> Make(int count, int gen)
        {
            var list = new List<ParityGenItem>(count);
            for (int i = 0; i < count; i++) list.Add(new ParityGenItem { Marker = gen * 1000 + i });
            return list;
        }

        private static object TimerQueueTimerOf(Timer t)
        {
            const BindingFlags F = BindingFlags.NonPublic | BindingFlags.Instance;
            object holder = typeof(Timer).GetField("_timer", F)?.GetValue(t)
                ?? throw new InvalidOperationException("Timer._timer not found");
            return holder.GetType().GetField("_timer", F)?.GetValue(holder)
                ?? throw new InvalidOperationException("TimerHolder._timer not found");
        }

        private static unsafe long SyncBlockIndex(object o)
        {
            uint header = *(uint*)(Mem.Addr(o) - 4);
            // BIT_SBLK_IS_HASH_OR_SYNCBLKINDEX set and BIT_SBLK_IS_HASHCODE clear: the low 26 bits index the table.
            return (header & 0x08000000) != 0 && (header & 0x04000000) == 0 ? header & 0x03FFFFFF : -1;
        }

        private static void WriteGen(Json w, string name, IEnumerable<object> objs)
        {
            w.Name(name).BeginArray();
            foreach (object o in objs)
            {
                w.BeginObject();
                w.PropHex("address", Mem.Addr(o));
                w.Prop("generation", GC.GetGeneration(o));
                w.Prop("size", Mem.UnalignedSizeOf(o));
                w.EndObject();
            }
            w.EndArray();
        }

        public void WriteTruth(Json w)
        {
            w.Name("generations").BeginObject();
            w.PropHex("itemMt", typeof(ParityGenItem).TypeHandle.Value);
            w.Prop("itemType", typeof(ParityGenItem).FullName);
            var items = new List<object>();
            foreach (var l in new[] { s_gen0, s_gen1, s_gen2 }) items.AddRange(l);
            WriteGen(w, "items", items);
            w.Name("loh");
            Truth.WriteObject(w, s_loh);
            w.Name("pinned");
            Truth.WriteObject(w, s_pinned);
            w.Prop("oddArrayType", typeof(byte[]).ToString());
            WriteGen(w, "oddArrays", s_odd);
            WriteGen(w, "finalizable", new object[] { s_finalOld, s_finalYoung });
            w.EndObject();

            w.Name("timers").BeginArray();
            for (int i = 0; i < s_timers.Length; i++)
            {
                w.BeginObject();
                w.PropHex("address", Mem.Addr(TimerQueueTimerOf(s_timers[i])));
                w.Prop("dueTime", (long)TimerTimes[i].Due);
                w.Prop("period", (long)TimerTimes[i].Period);
                w.PropHex("state", s_timerStates[i] == null ? 0 : Mem.Addr(s_timerStates[i]));
                w.Prop("stateType", s_timerStates[i] == null ? "" : typeof(ParityTimerState).FullName);
                MethodInfo callback = s_timerCallbacks[i].Method;
                w.Prop("method", callback.DeclaringType.FullName + "." + callback.Name);
                w.Prop("static", callback.IsStatic);
                w.EndObject();
            }
            w.EndArray();

            w.Name("monitor").BeginObject();
            w.Name("held").BeginObject();
            w.PropHex("address", Mem.Addr(s_held));
            w.Prop("type", typeof(ParityLockObject).FullName);
            w.Prop("syncBlock", SyncBlockIndex(s_held));
            w.Prop("osTid", s_monitorTid);
            w.Prop("recursion", 2);
            w.Prop("waiters", 1);
            w.EndObject();
            w.Name("released").BeginObject();
            w.PropHex("address", Mem.Addr(s_released));
            w.Prop("syncBlock", SyncBlockIndex(s_released));
            w.EndObject();
            w.EndObject();

            w.Name("generic").BeginObject();
            w.Prop("osTid", s_genericTid);
            w.PropHex("holderMt", typeof(ParityHolder<string>).TypeHandle.Value);
            w.Prop("holderType", typeof(ParityHolder<string>).FullName);
            w.PropHex("parkMd", typeof(ParityGeneric).GetMethod(nameof(ParityGeneric.Park)).MakeGenericMethod(typeof(string)).MethodHandle.Value);
            w.Prop("asyncOsTid", s_asyncTid);
            w.PropHex("runnerMt", typeof(ParityRunner<string>).TypeHandle.Value);
            // The compiler's state machine of RunAsync: a struct nested in ParityRunner<T>, generic over T.
            Type machine = Array.Find(typeof(ParityRunner<>).GetNestedTypes(BindingFlags.NonPublic),
                                      t => typeof(IAsyncStateMachine).IsAssignableFrom(t));
            w.PropHex("stateMachineMt", machine.MakeGenericType(typeof(string)).TypeHandle.Value);
            w.Prop("stateMachineType", machine.Name);
            w.EndObject();

            w.Name("memory").BeginObject();
            w.PropHex("stackSlot", s_monitorStackSlot);
            w.PropHex("native", s_native);
            w.Prop("nativeSize", NativeBlock);
            w.PropHex("gcObject", Mem.Addr(s_held));
            w.PropHex("handle", s_keptHandles[0]);
            w.Prop("assembly", typeof(ParityScenario).Assembly.Location);
            w.EndObject();

            w.Name("handles").BeginObject();
            w.Name("kept").BeginArray();
            foreach (nint h in s_keptHandles) w.Hex(h);
            w.EndArray();
            w.Name("leaked").BeginArray();
            foreach (long m in s_leakedHandlesMasked) w.Hex((nint)(m ^ HandleMask));
            w.EndArray();
            w.EndObject();

            w.Name("async").BeginObject();
            w.Name("source");
            WriteTask(w, ParityAsync.Source.Task);
            w.Name("chain").BeginArray();
            foreach (Task t in new Task[] { ParityAsync.Inner, ParityAsync.Middle, ParityAsync.Outer }) WriteTask(w, t);
            w.EndArray();
            w.Name("lonely");
            WriteTask(w, ParityAsync.Lonely);
            w.PropHex("awaiterMt", typeof(ParityAwaiter).TypeHandle.Value);
            w.Prop("awaiterType", typeof(ParityAwaiter).FullName);
            w.PropHex("taskAwaiterMt", typeof(TaskAwaiter<int>).TypeHandle.Value);
            w.EndObject();

            w.Name("queues").BeginArray();
            WriteQueue(w, s_intQueue, v => v.ToString());
            WriteQueue(w, s_stringQueue, v => "\"" + v + "\"");
            w.EndArray();

            w.Name("dictionaries").BeginArray();
            WriteDict(w, s_intDict, k => k.ToString(), v => "\"" + v + "\"");
            WriteDict(w, s_stringDict, k => "\"" + k + "\"", v => v ? "True" : "False");
            WriteDict(w, s_arrayDict, k => k.ToString(), v => "dumparray " + ((ulong)Mem.Addr(v)).ToString("x16"));
            // A struct value is shown as "dumpvc <its MethodTable> <its address inside the node>".
            WriteDict(w, s_structDict, k => k.ToString(),
                      v => "dumpvc " + ((ulong)typeof(ParityPinnedValue).TypeHandle.Value).ToString("x16") + " *");
            WriteDict(w, s_objectDict, k => "'" + k + "'", v => v == null ? "null" : "dumpobj " + ((ulong)Mem.Addr(v)).ToString("x16"));
            w.EndArray();
        }

        private static void WriteTask(Json w, Task t)
        {
            const BindingFlags F = BindingFlags.NonPublic | BindingFlags.Instance;
            w.BeginObject();
            w.PropHex("address", Mem.Addr(t));
            w.PropHex("mt", Mem.MethodTableOf(t));
            w.Prop("flags", (long)(int)typeof(Task).GetField("m_stateFlags", F).GetValue(t));
            FieldInfo sm = t.GetType().GetField("StateMachine");
            w.Prop("stateMachine", sm?.FieldType.FullName);
            w.EndObject();
        }

        private static void WriteQueue<T>(Json w, ConcurrentQueue<T> q, Func<T, string> text)
        {
            w.BeginObject();
            w.PropHex("address", Mem.Addr(q));
            w.Name("items").BeginArray();
            foreach (T item in q.ToArray()) w.Value(text(item));
            w.EndArray();
            w.EndObject();
        }

        private static void WriteDict<TK, TV>(Json w, ConcurrentDictionary<TK, TV> d, Func<TK, string> key, Func<TV, string> value)
        {
            w.BeginObject();
            w.PropHex("address", Mem.Addr(d));
            w.Name("entries").BeginArray();
            foreach (KeyValuePair<TK, TV> kv in d)
            {
                w.BeginArray();
                w.Value(key(kv.Key));
                w.Value(value(kv.Value));
                w.EndArray();
            }
            w.EndArray();
            w.EndObject();
        }

        public bool OnCommand(string command) => false;
    }
}
