using System;
using System.Collections.Generic;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Threading;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `heap`: a heap of known contents. Every object of a test type is reachable from the static
    /// root array <see cref="s_root"/> (except the stack-only items and the garbage), and the truth
    /// lists every instance of every test type with its address, size and generation.
    /// The scenario object itself has no fields, so Main's local referencing it roots nothing.
    /// </summary>
    internal sealed class HeapScenario : IScenario
    {
        public const int CountA = 1000, CountB = 3333, CountC = 100, CountD = 7, CountBoxed = 5, CountFinalizable = 9;
        public const int CountGen2 = 11, CountGen1 = 13, CountGen0 = 17, CountGarbage = 25, Workers = 3;
        public const string FrozenLiteral = "SOSEXT_FROZEN_LITERAL_7f3a";

        // Slots of the static root array.
        private enum Slot
        {
            StrEmpty, StrAscii, StrNonAscii, StrLong, StrFrozen,
            ItemsA, ListB, DictC, SetD, ItemE,
            Bytes, Ints, Doubles, IntCube, StructArray, StructMatrix, RefStructArray, Jagged, EmptyArray, EmptyIntArray,
            LohBytes, LohItems, PohBytes, PohLongs, PohStructs,
            BoxedInt, BoxedStructs, HolderRef, HolderStruct, Finalizables, Chain, StackHeld,
            Gen2, Gen1, Gen0,
            Count,
        }

        /// <summary>The static root: everything live in this scenario hangs off it.</summary>
        internal static object[] s_root;

        // Garbage is known only by address; these arrays are allocated once, before any settling.
        private static readonly nint[] s_garbageAddr = new nint[CountGarbage];
        private static readonly long[] s_garbageSize = new long[CountGarbage];
        private static readonly int[] s_garbageGen = new int[CountGarbage];

        // Worker threads: each holds its items in locals and reports their addresses on request.
        private static readonly Thread[] s_threads = new Thread[Workers];
        private static readonly int[] s_workerTid = new int[Workers];
        private static readonly ManualResetEventSlim[] s_started = NewEvents();
        private static readonly ManualResetEventSlim[] s_request = NewEvents();
        private static readonly ManualResetEventSlim[] s_done = NewEvents();
        private static readonly nint[] s_heldAddr = new nint[Workers], s_onlyAddr = new nint[Workers];
        private static readonly long[] s_heldSize = new long[Workers], s_onlySize = new long[Workers];
        private static readonly int[] s_heldGen = new int[Workers], s_onlyGen = new int[Workers];

        private static ManualResetEventSlim[] NewEvents()
        {
            var events = new ManualResetEventSlim[Workers];
            for (int i = 0; i < Workers; i++) events[i] = new ManualResetEventSlim(false, 0);
            return events;
        }

        private static object Root(Slot s) => s_root[(int)s];
        private static void SetRoot(Slot s, object o) => s_root[(int)s] = o;

        public void Build(string[] args)
        {
            s_root = new object[(int)Slot.Count];

            // Strings made at run time, so their contents exist nowhere else; plus one literal (frozen heap on .NET 8+).
            SetRoot(Slot.StrEmpty, new string('x', 0)); // the runtime returns the string.Empty singleton
            SetRoot(Slot.StrAscii, string.Concat("SOSEXT_ASCII_", "hello world"));
            SetRoot(Slot.StrNonAscii, string.Concat("h\u00e9llo", " w\u00f6rld", " \u2713 \u65e5\u672c\u8a9e"));
            SetRoot(Slot.StrLong, new string('L', 50_000)); // 100,022 bytes: LOH
            SetRoot(Slot.StrFrozen, FrozenLiteral);

            var itemsA = new HeapItemA[CountA];
            for (int i = 0; i < CountA; i++) itemsA[i] = new HeapItemA();
            SetRoot(Slot.ItemsA, itemsA);

            // Exact capacities: no resize garbage (and the first full GC would collect it anyway).
            var listB = new List<HeapItemB>(CountB);
            for (int i = 0; i < CountB; i++) listB.Add(new HeapItemB { X = i, Y = -i, Z = i * 3 });
            SetRoot(Slot.ListB, listB);

            var dictC = new Dictionary<UniqueKey, HeapItemC>(CountC);
            for (int i = 0; i < CountC; i++)
                dictC.Add(new UniqueKey(i), new HeapItemC { Name = string.Concat("sosext-c-", i.ToString("d3")), Next = itemsA[i] });
            SetRoot(Slot.DictC, dictC);

            var setD = new HashSet<HeapItemD>(CountD);
            for (int i = 0; i < CountD; i++)
                setD.Add(new HeapItemD { Id = 1000 + i, B = listB[i], Weight = i + 0.5, Flag = (byte)i, Label = string.Concat("sosext-d-", i.ToString()) });
            SetRoot(Slot.SetD, setD);

            SetRoot(Slot.ItemE, new HeapItemE { Str = string.Concat("sosext-", "field-string"), Obj = itemsA[0] });

            var bytes = new byte[1234];
            for (int i = 0; i < bytes.Length; i++) bytes[i] = (byte)i;
            SetRoot(Slot.Bytes, bytes);
            var ints = new int[77];
            for (int i = 0; i < ints.Length; i++) ints[i] = i * i;
            SetRoot(Slot.Ints, ints);
            var doubles = new double[33];
            for (int i = 0; i < doubles.Length; i++) doubles[i] = i * 0.5;
            SetRoot(Slot.Doubles, doubles);
            var cube = new int[2, 3, 4];
            for (int i = 0; i < 2; i++) for (int j = 0; j < 3; j++) for (int k = 0; k < 4; k++) cube[i, j, k] = 100 * i + 10 * j + k;
            SetRoot(Slot.IntCube, cube);
            var structs = new UniqueStruct[50];
            for (int i = 0; i < structs.Length; i++) structs[i] = new UniqueStruct { A = i, B = -i, C = 1L << (i % 60) };
            SetRoot(Slot.StructArray, structs);
            var matrix = new UniqueStruct[4, 5];
            for (int i = 0; i < 4; i++) for (int j = 0; j < 5; j++) matrix[i, j] = new UniqueStruct { A = i, B = j, C = i * 5 + j };
            SetRoot(Slot.StructMatrix, matrix);
            var refStructs = new RefStruct[10];
            for (int i = 0; i < refStructs.Length; i++) refStructs[i] = new RefStruct { Ref = itemsA[i], Value = i };
            SetRoot(Slot.RefStructArray, refStructs);
            var jagged = new HeapItemA[3][];
            for (int i = 0; i < jagged.Length; i++)
            {
                jagged[i] = new HeapItemA[i + 2];
                for (int j = 0; j < jagged[i].Length; j++) jagged[i][j] = itemsA[10 + 3 * i + j];
            }
            SetRoot(Slot.Jagged, jagged);
            SetRoot(Slot.EmptyArray, new EmptyElem[0]);
            SetRoot(Slot.EmptyIntArray, new int[0]);

            // Large object heap (> 85,000 bytes).
            SetRoot(Slot.LohBytes, new byte[100_000]);
            var lohItems = new HeapItemA[20_000];
            for (int i = 0; i < 10; i++) lohItems[i] = itemsA[i];
            SetRoot(Slot.LohItems, lohItems);

            // Pinned object heap.
            SetRoot(Slot.PohBytes, GC.AllocateArray<byte>(1000, pinned: true));
            long[] pohLongs = GC.AllocateUninitializedArray<long>(500, pinned: true);
            Array.Fill(pohLongs, 0x1122334455667788L);
            SetRoot(Slot.PohLongs, pohLongs);
            SetRoot(Slot.PohStructs, GC.AllocateArray<UniqueStruct>(16, pinned: true));

            SetRoot(Slot.BoxedInt, (object)123456);
            var boxed = new object[CountBoxed];
            for (int i = 0; i < CountBoxed; i++) boxed[i] = new UniqueStruct { A = 7, B = i, C = -7 };
            SetRoot(Slot.BoxedStructs, boxed);
            SetRoot(Slot.HolderRef, new GenericHolder<HeapItemA> { Value = itemsA[CountA - 1] });
            SetRoot(Slot.HolderStruct, new GenericHolder<UniqueStruct> { Value = new UniqueStruct { A = 1, B = 2, C = 3 } });

            var finalizables = new object[CountFinalizable];
            for (int i = 0; i < CountFinalizable; i++) finalizables[i] = new FinalizableItem(i);
            SetRoot(Slot.Finalizables, finalizables);

            var tail = new ChainTail { Marker = string.Concat("sosext-", "chain-tail") };
            var link2 = new ChainLink { Next = tail, Index = 2 };
            var link1 = new ChainLink { Next = link2, Index = 1 };
            SetRoot(Slot.Chain, new ChainHead { First = link1 });

            SetRoot(Slot.StackHeld, new object[Workers]);
            StartWorkers();
        }

        private static void StartWorkers()
        {
            for (int i = 0; i < Workers; i++)
            {
                var t = new Thread(WorkerMain) { Name = "sosext-stack-" + (i + 1), IsBackground = true };
                s_threads[i] = t;
                t.Start(i);
            }
            for (int i = 0; i < Workers; i++)
                if (!s_started[i].Wait(30_000)) throw new TimeoutException("worker thread did not start");
        }

        // Runs on each worker. `held` and `only` are address-exposed locals (ref passed below), so they
        // live in this frame's stack slots for the whole method, where any root scanner can find them.
        private static void WorkerMain(object state)
        {
            int i = (int)state;
            s_workerTid[i] = Mem.CurrentOsTid();
            StackHeldItem held = new StackHeldItem(i);
            StackOnlyItem only = new StackOnlyItem(i);
            ((object[])Root(Slot.StackHeld))[i] = held;
            s_started[i].Set();
            while (true)
            {
                s_request[i].Wait();
                s_request[i].Reset();
                s_heldAddr[i] = Mem.AddrOfSlot(ref held);
                s_onlyAddr[i] = Mem.AddrOfSlot(ref only);
                s_heldSize[i] = Mem.SizeOf(held);
                s_onlySize[i] = Mem.SizeOf(only);
                s_heldGen[i] = GC.GetGeneration(held);
                s_onlyGen[i] = GC.GetGeneration(only);
                s_done[i].Set();
            }
            // Unreachable: the process ends with these threads blocked in Wait; the locals stay live.
        }

        private static void RequestWorkerReports()
        {
            for (int i = 0; i < Workers; i++)
            {
                s_done[i].Reset();
                s_request[i].Set();
                if (!s_done[i].Wait(30_000)) throw new TimeoutException("worker thread did not report");
            }
        }

        private const int MaxSettleTries = 5;
        private static int s_settleTries;

        public void Settle(int attempt)
        {
            // The GC may decline to promote (or, with DATAS, count a heap-count change as a GC that
            // moved nothing), so check the generations and start over until they are as designed.
            for (s_settleTries = 1; ; s_settleTries++)
            {
                SettleOnce();
                if (GenerationsAsDesigned() || s_settleTries == MaxSettleTries) break;
                Console.Out.WriteLine($"SOSEXT-LOG generations not as designed after settle {s_settleTries}; settling again");
            }
            MakeGen0();
            MakeGarbage();
        }

        private static void SettleOnce()
        {
            // Drop the previous attempt's generation objects; the full GCs below collect them.
            SetRoot(Slot.Gen2, null);
            SetRoot(Slot.Gen1, null);
            SetRoot(Slot.Gen0, null);

            var gen2 = new object[CountGen2];
            for (int i = 0; i < CountGen2; i++) gen2[i] = new Gen2Item(i);
            SetRoot(Slot.Gen2, gen2);
            GC.Collect();
            GC.Collect();
            GC.WaitForPendingFinalizers();

            var gen1 = new object[CountGen1];
            for (int i = 0; i < CountGen1; i++) gen1[i] = new Gen1Item(i);
            SetRoot(Slot.Gen1, gen1);
            GC.Collect(0);
            // Nothing queued for finalization may run (and allocate) while gathering or after READY.
            GC.WaitForPendingFinalizers();
        }

        private static bool GenerationsAsDesigned()
        {
            foreach (object o in (object[])Root(Slot.Gen2)) if (GC.GetGeneration(o) != 2) return false;
            foreach (object o in (object[])Root(Slot.Gen1)) if (GC.GetGeneration(o) != 1) return false;
            return true;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void MakeGen0()
        {
            var gen0 = new object[CountGen0];
            for (int i = 0; i < CountGen0; i++) gen0[i] = new Gen0Item(i);
            SetRoot(Slot.Gen0, gen0);
        }

        // In its own frame, so that no live stack slot of a later frame still refers to the garbage.
        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void MakeGarbage()
        {
            for (int i = 0; i < CountGarbage; i++)
            {
                var g = new GarbageItem(i);
                s_garbageAddr[i] = Mem.Addr(g);
                s_garbageSize[i] = Mem.SizeOf(g);
                s_garbageGen[i] = GC.GetGeneration(g);
            }
        }

        private static object PrivateField(object o, string name) =>
            o.GetType().GetField(name, BindingFlags.Instance | BindingFlags.NonPublic).GetValue(o);

        public void WriteTruth(Json w)
        {
            RequestWorkerReports();
            WaitForWorkersBlocked();

            var itemsA = (HeapItemA[])Root(Slot.ItemsA);
            var listB = (List<HeapItemB>)Root(Slot.ListB);
            var dictC = (Dictionary<UniqueKey, HeapItemC>)Root(Slot.DictC);
            var setD = (HashSet<HeapItemD>)Root(Slot.SetD);
            var jagged = (HeapItemA[][])Root(Slot.Jagged);
            var chain = (ChainHead)Root(Slot.Chain);

            var types = new TypeTable(trackAddresses: true, dedupe: true);
            // Declared first: a fixed order, and entries for types with no live instance.
            foreach (Type t in new[]
            {
                typeof(HeapItemA), typeof(HeapItemB), typeof(HeapItemC), typeof(HeapItemD), typeof(HeapItemE),
                typeof(UniqueKey), typeof(UniqueStruct), typeof(EmptyElem), typeof(FinalizableItem),
                typeof(Gen2Item), typeof(Gen1Item), typeof(Gen0Item), typeof(GarbageItem),
                typeof(StackHeldItem), typeof(StackOnlyItem), typeof(ChainHead), typeof(ChainLink), typeof(ChainTail),
                typeof(GenericHolder<HeapItemA>), typeof(GenericHolder<UniqueStruct>),
                typeof(HeapItemA[]), typeof(HeapItemA[][]), typeof(HeapItemB[]), typeof(UniqueStruct[]), typeof(UniqueStruct[,]),
                typeof(RefStruct[]), typeof(EmptyElem[]),
                typeof(List<HeapItemB>), typeof(Dictionary<UniqueKey, HeapItemC>), typeof(HashSet<HeapItemD>),
            }) types.Declare(t);

            foreach (HeapItemA a in itemsA) types.AddLive(a);
            for (int i = 0; i < listB.Count; i++) types.AddLive(listB[i]);
            foreach (KeyValuePair<UniqueKey, HeapItemC> kv in dictC) { types.AddLive(kv.Key); types.AddLive(kv.Value); }
            foreach (HeapItemD d in setD) types.AddLive(d);
            types.AddLive(Root(Slot.ItemE));
            foreach (object box in (object[])Root(Slot.BoxedStructs)) types.AddLive(box);
            foreach (object f in (object[])Root(Slot.Finalizables)) types.AddLive(f);
            foreach (Slot s in new[] { Slot.Gen2, Slot.Gen1, Slot.Gen0, Slot.StackHeld })
                foreach (object o in (object[])Root(s)) types.AddLive(o);
            types.AddLive(chain);
            for (object o = chain.First; o != null; o = (o as ChainLink)?.Next) types.AddLive(o);
            types.AddLive(Root(Slot.HolderRef));
            types.AddLive(Root(Slot.HolderStruct));
            // Arrays of test types.
            types.AddLive(itemsA);
            types.AddLive(jagged);
            foreach (HeapItemA[] inner in jagged) types.AddLive(inner);
            types.AddLive(Root(Slot.LohItems));
            types.AddLive(Root(Slot.StructArray));
            types.AddLive(Root(Slot.PohStructs));
            types.AddLive(Root(Slot.StructMatrix));
            types.AddLive(Root(Slot.RefStructArray));
            types.AddLive(Root(Slot.EmptyArray));
            // Collections and what they allocate inside (internal arrays, default comparers).
            object listItems = PrivateField(listB, "_items");
            object dictEntries = PrivateField(dictC, "_entries");
            object setEntries = PrivateField(setD, "_entries");
            // List<T>'s static empty array (a T[0] made by its static constructor) is an instance too.
            object listEmpty = typeof(List<HeapItemB>).GetField("s_emptyArray", BindingFlags.Static | BindingFlags.NonPublic)?.GetValue(null);
            types.AddLive(listEmpty);
            types.AddLive(listB);
            types.AddLive(listItems);
            types.AddLive(dictC);
            types.AddLive(dictEntries);
            types.AddLive(dictC.Comparer);
            types.AddLive(setD);
            types.AddLive(setEntries);
            types.AddLive(setD.Comparer);
            // Known only by address.
            for (int i = 0; i < Workers; i++) types.AddLiveRaw(typeof(StackOnlyItem), s_onlyAddr[i], s_onlySize[i], s_onlyGen[i]);
            for (int i = 0; i < CountGarbage; i++) types.AddDead(typeof(GarbageItem), s_garbageAddr[i], s_garbageSize[i]);

            w.Name("types");
            types.Write(w);
            w.Name("testTypeTotals");
            types.WriteTotals(w);

            w.Name("objects").BeginObject();
            void Obj(string role, object o) { w.Name(role); Truth.WriteObject(w, o); }
            Obj("staticRoot", s_root);
            Obj("strEmpty", Root(Slot.StrEmpty));
            Obj("strAscii", Root(Slot.StrAscii));
            Obj("strNonAscii", Root(Slot.StrNonAscii));
            Obj("strLong", Root(Slot.StrLong));
            Obj("strFrozenLiteral", Root(Slot.StrFrozen));
            Obj("itemsA", itemsA);
            Obj("itemA0", itemsA[0]);
            Obj("list", listB);
            Obj("listItems", listItems);
            if (listEmpty != null) Obj("listStaticEmptyArray", listEmpty);
            Obj("dictionary", dictC);
            Obj("dictionaryEntries", dictEntries);
            Obj("dictionaryComparer", dictC.Comparer);
            Obj("hashSet", setD);
            Obj("hashSetEntries", setEntries);
            Obj("hashSetComparer", setD.Comparer);
            Obj("bytes", Root(Slot.Bytes));
            Obj("ints", Root(Slot.Ints));
            Obj("doubles", Root(Slot.Doubles));
            Obj("intCube", Root(Slot.IntCube));
            Obj("structArray", Root(Slot.StructArray));
            Obj("structMatrix", Root(Slot.StructMatrix));
            Obj("refStructArray", Root(Slot.RefStructArray));
            Obj("jagged", jagged);
            Obj("jagged0", jagged[0]);
            Obj("emptyArray", Root(Slot.EmptyArray));
            Obj("emptyIntArray", Root(Slot.EmptyIntArray));
            Obj("lohBytes", Root(Slot.LohBytes));
            Obj("lohItems", Root(Slot.LohItems));
            Obj("pohBytes", Root(Slot.PohBytes));
            Obj("pohLongs", Root(Slot.PohLongs));
            Obj("pohStructs", Root(Slot.PohStructs));
            Obj("boxedInt", Root(Slot.BoxedInt));
            Obj("boxedStruct0", ((object[])Root(Slot.BoxedStructs))[0]);
            Obj("holderRef", Root(Slot.HolderRef));
            Obj("holderStruct", Root(Slot.HolderStruct));
            Obj("finalizable0", ((object[])Root(Slot.Finalizables))[0]);
            Obj("gen2Item0", ((object[])Root(Slot.Gen2))[0]);
            Obj("gen1Item0", ((object[])Root(Slot.Gen1))[0]);
            Obj("gen0Item0", ((object[])Root(Slot.Gen0))[0]);
            Obj("chainTail", ((ChainLink)chain.First.Next).Next);
            w.Name("garbage0");
            Truth.WriteRawObject(w, typeof(GarbageItem), s_garbageAddr[0], s_garbageSize[0], s_garbageGen[0]);
            w.EndObject();

            WriteItemE(w, (HeapItemE)Root(Slot.ItemE));
            WriteRootChain(w, chain);
            WriteThreads(w);
            w.Prop("settleTries", s_settleTries);
            w.Name("staticRootSlots").BeginObject();
            for (Slot s = 0; s < Slot.Count; s++) w.Prop(s.ToString(), (long)s);
            w.EndObject();
        }

        private static void WaitForWorkersBlocked()
        {
            // The workers re-enter Wait after reporting; let them get there so nothing runs after READY.
            for (int i = 0; i < Workers; i++)
                for (int spins = 0; spins < 5000 && (s_threads[i].ThreadState & ThreadState.WaitSleepJoin) == 0; spins++)
                    Thread.Sleep(1);
        }

        private static void WriteItemE(Json w, HeapItemE e)
        {
            w.Name("itemE").BeginObject();
            w.PropHex("address", Mem.Addr(e));
            w.PropHex("mt", Mem.CheckedMethodTable(e));
            w.Name("fields").BeginArray();
            // Offsets are from the object address (the MethodTable pointer), as SOS prints them.
            void F<T>(string name, ref T field, object value) =>
                w.BeginObject().Prop("name", name).Prop("type", typeof(T).ToString())
                 .Prop("offset", Mem.FieldOffset(e, ref field)).Name("value").Any(value).EndObject();
            F(nameof(e.Flag), ref e.Flag, e.Flag);
            F(nameof(e.Byte), ref e.Byte, e.Byte);
            F(nameof(e.Char), ref e.Char, e.Char);
            F(nameof(e.Short), ref e.Short, e.Short);
            F(nameof(e.Int), ref e.Int, e.Int);
            F(nameof(e.Long), ref e.Long, e.Long);
            F(nameof(e.Float), ref e.Float, e.Float);
            F(nameof(e.Double), ref e.Double, e.Double);
            F(nameof(e.NativeInt), ref e.NativeInt, (long)e.NativeInt);
            F(nameof(e.Enum), ref e.Enum, (int)e.Enum);
            F(nameof(e.Inline), ref e.Inline, $"A={e.Inline.A} B={e.Inline.B} C={e.Inline.C}");
            F(nameof(e.Str), ref e.Str, Mem.Hex(Mem.Addr(e.Str)));
            F(nameof(e.Obj), ref e.Obj, Mem.Hex(Mem.Addr(e.Obj)));
            w.EndArray();
            w.Prop("strValue", e.Str);
            w.EndObject();
        }

        private static void WriteRootChain(Json w, ChainHead head)
        {
            // The only path to the tail: s_root[Chain] -> head.First -> link.Next -> link.Next.
            var link1 = head.First;
            var link2 = (ChainLink)link1.Next;
            var tail = (ChainTail)link2.Next;
            w.Name("rootChain").BeginObject();
            w.Prop("staticField", typeof(HeapScenario).FullName + "." + nameof(s_root));
            w.Name("path").BeginArray();
            void Step(object o, string via) =>
                w.BeginObject().PropHex("address", Mem.Addr(o)).Prop("type", o.GetType().ToString()).Prop("via", via).EndObject();
            Step(s_root, null);
            Step(head, "[" + (int)Slot.Chain + "]");
            Step(link1, nameof(ChainHead.First));
            Step(link2, nameof(ChainLink.Next));
            Step(tail, nameof(ChainLink.Next));
            w.EndArray();
            w.EndObject();
        }

        private static void WriteThreads(Json w)
        {
            w.Name("threads").BeginArray();
            for (int i = 0; i < Workers; i++)
            {
                w.BeginObject();
                w.Prop("name", s_threads[i].Name);
                w.Prop("managedId", s_threads[i].ManagedThreadId);
                w.Prop("osTid", s_workerTid[i]);
                w.Name("held");
                Truth.WriteRawObject(w, typeof(StackHeldItem), s_heldAddr[i], s_heldSize[i], s_heldGen[i]);
                w.Name("stackOnly");
                Truth.WriteRawObject(w, typeof(StackOnlyItem), s_onlyAddr[i], s_onlySize[i], s_onlyGen[i]);
                w.EndObject();
            }
            w.EndArray();
        }

        public bool OnCommand(string command) => false;
    }
}
