using System;
using System.Collections.Generic;
using System.Globalization;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `leakheap [N]`: a leak's heap, where almost every object is alive (speed tests on the shape of real
    /// leak dumps). A static session cache that never evicts: a Dictionary by id and an LRU LinkedList,
    /// each <see cref="LeakSession"/> with a name, a buffer, a List of <see cref="LeakItem"/>s (each with a
    /// label and a back reference to its session) and its LRU node. Requests come in a seeded random order:
    /// a new session, or a touch of an old one (moved to the LRU front, one more item), so references run
    /// across the whole heap, and the list, the nodes and the back references make one huge strongly
    /// connected component. N (default 5,000,000) is about the number of objects the heap walk counts (the
    /// free blocks the uncompacted heap keeps among them): N/11.6 sessions.
    /// </summary>
    internal sealed class LeakHeapScenario : IScenario
    {
        internal static LeakCache s_cache;
        private static long s_requested;

        public void Build(string[] args)
        {
            long n = args.Length > 0 ? long.Parse(args[0], CultureInfo.InvariantCulture) : 5_000_000;
            if (n < 100) throw new ArgumentException("leakheap needs N >= 100");
            s_requested = n;
            int sessions = (int)(n * 10 / 116);
            var cache = s_cache = new LeakCache();
            var rng = new Random(26);
            int made = 0;
            long touches = 0;
            while (made < sessions)
            {
                if (made > 0 && rng.Next(2) == 0)
                {
                    // A touch: the session moves to the LRU front and keeps one more item.
                    LeakSession s = cache.ById[rng.Next(made)];
                    cache.Lru.Remove(s.Node);
                    cache.Lru.AddFirst(s.Node);
                    s.Items.Add(new LeakItem { Session = s, Label = "item " + touches, Value = touches });
                    touches++;
                    continue;
                }
                var session = new LeakSession { Id = made, Name = "session " + made, Buffer = new byte[16 + made % 49],
                                                Items = new List<LeakItem>(), Owner = cache };
                session.Items.Add(new LeakItem { Session = session, Label = "first " + made, Value = made });
                session.Node = cache.Lru.AddFirst(session);
                cache.ById.Add(made, session);
                made++;
            }
        }

        public void Settle(int attempt)
        {
            // Compact: what is left is what the cache keeps (and the runtime's own objects).
            if (attempt <= 1) { GC.Collect(); GC.Collect(); }
        }

        public void WriteTruth(Json w)
        {
            var types = new TypeTable(trackAddresses: false, dedupe: false);
            types.Declare(typeof(LeakSession));
            types.Declare(typeof(LeakItem));
            long sessions = 0, items = 0;
            foreach (LeakSession s in s_cache.ById.Values)
            {
                types.AddLive(s);
                sessions++;
                foreach (LeakItem it in s.Items) { types.AddLive(it); items++; }
            }
            w.Prop("requested", s_requested);
            w.Prop("sessions", sessions);
            w.Prop("items", items);
            w.Name("types");
            types.Write(w);
            // The "leaked" object gcroot benchmarks ask about: the last item's label of the session in the
            // middle of the LRU list (deep in it by the list, three steps from the cache by the dictionary).
            LinkedListNode<LeakSession> node = s_cache.Lru.First;
            for (int k = 0; k < s_cache.Lru.Count / 2; k++) node = node.Next;
            LeakSession middle = node.Value;
            LeakSession oldest = s_cache.ById[0];
            w.Name("objects").BeginObject();
            w.Name("cache"); Truth.WriteObject(w, s_cache);
            w.Name("middleSession"); Truth.WriteObject(w, middle);
            w.Name("deepNode"); Truth.WriteObject(w, middle.Items[middle.Items.Count - 1].Label);
            w.Name("firstLeaf"); Truth.WriteObject(w, oldest.Buffer);
            w.EndObject();
        }

        public bool OnCommand(string command) => false;
    }
}
