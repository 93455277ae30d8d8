using System;
using System.Collections.Generic;
using System.Globalization;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `bigheap [N] [mixed]`: N (default 5,000,000) live small objects for speed tests: 60% BigNode in chains,
    /// 30% BigLeaf in BigLeaf[] chunks, 10% byte[] payloads of 8..64 bytes in byte[][] chunks, all under
    /// the static root <see cref="s_root"/>. The truth has per-type counts and sizes, no address lists.
    /// By default each kind is allocated in one long run; with `mixed` the three are interleaved
    /// (node, node, leaf, node, payload, ...), so the heap has no long runs of one type.
    /// Stdin command `alloc N` allocates N more <see cref="AllocItem"/>s (kept alive) and answers
    /// `SOSEXT-ALLOCATED {"mt": "0x...", "count": total}`: the heap grows while a debugger lets it run.
    /// </summary>
    internal sealed class BigHeapScenario : IScenario
    {
        private const int ChainLength = 1000, LeafChunk = 10_000, PayloadChunk = 10_000;

        // [0] BigNode[] chain heads, [1] object[] of BigLeaf[] chunks, [2] object[] of byte[][] chunks.
        internal static object[] s_root;
        private static long s_requested;
        // What `alloc N` made; the list's backing arrays are AllocItem[], never AllocItem instances.
        private static readonly List<AllocItem> s_allocated = new();

        public void Build(string[] args)
        {
            long n = args.Length > 0 ? long.Parse(args[0], CultureInfo.InvariantCulture) : 5_000_000;
            if (n < 10) throw new ArgumentException("bigheap needs N >= 10");
            s_requested = n;
            long nodes = n * 6 / 10, leaves = n * 3 / 10, payloads = n - nodes - leaves;

            s_root = new object[3];
            if (args.Length > 1 && args[1] == "mixed")
            {
                BuildMixed(nodes, leaves, payloads);
                return;
            }
            var heads = new BigNode[(nodes + ChainLength - 1) / ChainLength];
            long made = 0;
            for (int c = 0; c < heads.Length; c++)
            {
                BigNode prev = null;
                for (int k = 0; k < ChainLength && made < nodes; k++, made++)
                {
                    var node = new BigNode { Value = (int)made };
                    if (prev == null) heads[c] = node; else prev.Next = node;
                    prev = node;
                }
            }
            s_root[0] = heads;

            var leafChunks = new object[(leaves + LeafChunk - 1) / LeafChunk];
            for (long i = 0; i < leaves; i++)
            {
                int c = (int)(i / LeafChunk), k = (int)(i % LeafChunk);
                if (k == 0) leafChunks[c] = new BigLeaf[Math.Min(LeafChunk, leaves - i)];
                ((BigLeaf[])leafChunks[c])[k] = new BigLeaf { A = i, B = (int)(i & 0xFFFF) };
            }
            s_root[1] = leafChunks;

            var payloadChunks = new object[(payloads + PayloadChunk - 1) / PayloadChunk];
            for (long i = 0; i < payloads; i++)
            {
                int c = (int)(i / PayloadChunk), k = (int)(i % PayloadChunk);
                if (k == 0) payloadChunks[c] = new byte[Math.Min(PayloadChunk, payloads - i)][];
                ((byte[][])payloadChunks[c])[k] = new byte[8 + (int)(i % 57)];
            }
            s_root[2] = payloadChunks;
        }

        /// <summary>The same objects as the default build, allocated interleaved: 6 nodes, 3 leaves
        /// and 1 payload per round, so neighbours on the heap are of different types.</summary>
        private static void BuildMixed(long nodes, long leaves, long payloads)
        {
            var heads = new BigNode[(nodes + ChainLength - 1) / ChainLength];
            var leafChunks = new object[(leaves + LeafChunk - 1) / LeafChunk];
            var payloadChunks = new object[(payloads + PayloadChunk - 1) / PayloadChunk];
            long madeNodes = 0, madeLeaves = 0, madePayloads = 0;
            BigNode prev = null;
            while (madeNodes < nodes || madeLeaves < leaves || madePayloads < payloads)
            {
                for (int r = 0; r < 10; r++)
                {
                    if (r % 10 == 9 && madePayloads < payloads)
                    {
                        long i = madePayloads++;
                        int c = (int)(i / PayloadChunk), k = (int)(i % PayloadChunk);
                        if (k == 0) payloadChunks[c] = new byte[Math.Min(PayloadChunk, payloads - i)][];
                        ((byte[][])payloadChunks[c])[k] = new byte[8 + (int)(i % 57)];
                    }
                    else if (r % 3 == 2 && madeLeaves < leaves)
                    {
                        long i = madeLeaves++;
                        int c = (int)(i / LeafChunk), k = (int)(i % LeafChunk);
                        if (k == 0) leafChunks[c] = new BigLeaf[Math.Min(LeafChunk, leaves - i)];
                        ((BigLeaf[])leafChunks[c])[k] = new BigLeaf { A = i, B = (int)(i & 0xFFFF) };
                    }
                    else if (madeNodes < nodes)
                    {
                        var node = new BigNode { Value = (int)madeNodes };
                        if (madeNodes % ChainLength == 0) heads[madeNodes / ChainLength] = node; else prev.Next = node;
                        prev = node;
                        madeNodes++;
                    }
                }
            }
            s_root[0] = heads;
            s_root[1] = leafChunks;
            s_root[2] = payloadChunks;
        }

        public void Settle(int attempt)
        {
            // Compact once so the heap holds no garbage of the test types; retries need no new state.
            if (attempt <= 1) { GC.Collect(); GC.Collect(); }
        }

        public void WriteTruth(Json w)
        {
            var types = new TypeTable(trackAddresses: false, dedupe: false);
            types.Declare(typeof(BigNode));
            types.Declare(typeof(BigLeaf));
            types.Declare(typeof(BigNode[]));
            types.Declare(typeof(BigLeaf[]));
            var payloadTypes = new TypeTable(trackAddresses: false, dedupe: false);
            payloadTypes.Declare(typeof(byte[]));

            var heads = (BigNode[])s_root[0];
            types.AddLive(heads);
            foreach (BigNode head in heads)
                for (BigNode node = head; node != null; node = node.Next) types.AddLive(node);
            foreach (BigLeaf[] chunk in (object[])s_root[1])
            {
                types.AddLive(chunk);
                foreach (BigLeaf leaf in chunk) types.AddLive(leaf);
            }
            foreach (byte[][] chunk in (object[])s_root[2])
                foreach (byte[] payload in chunk) payloadTypes.AddLive(payload);

            w.Prop("requested", s_requested);
            w.Name("types");
            types.Write(w);
            w.Name("testTypeTotals");
            types.WriteTotals(w);
            // byte[] is not unique to this program: these are lower bounds for the heap's byte[] statistics.
            w.Name("payloads");
            payloadTypes.Write(w);
            w.Name("objects").BeginObject();
            w.Name("staticRoot"); Truth.WriteObject(w, s_root);
            w.Name("chainHeads"); Truth.WriteObject(w, heads);
            w.Name("firstNode"); Truth.WriteObject(w, heads[0]);
            // A "leaked" object deep in the graph: the last node of the middle chain, up to
            // 1,000 references below its chain's head (what gcroot benchmarks search for).
            BigNode deep = heads[heads.Length / 2];
            while (deep.Next != null) deep = deep.Next;
            w.Name("deepNode"); Truth.WriteObject(w, deep);
            w.Name("firstLeaf"); Truth.WriteObject(w, ((BigLeaf[])((object[])s_root[1])[0])[0]);
            w.Name("firstPayload"); Truth.WriteObject(w, ((byte[][])((object[])s_root[2])[0])[0]);
            w.EndObject();
        }

        public bool OnCommand(string command)
        {
            if (!command.StartsWith("alloc ", StringComparison.Ordinal)) return false;
            long n = long.Parse(command.AsSpan(6), CultureInfo.InvariantCulture);
            for (long i = 0; i < n; i++) s_allocated.Add(new AllocItem { Serial = s_allocated.Count });
            var w = new Json();
            w.BeginObject();
            w.PropHex("mt", typeof(AllocItem).TypeHandle.Value);
            w.Prop("count", s_allocated.Count);
            w.EndObject();
            Console.Out.WriteLine("SOSEXT-ALLOCATED " + w);
            return true;
        }
    }
}
