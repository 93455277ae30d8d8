using System;
using System.Globalization;
using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `deeplist [N]`: one singly linked list of N (default 1,000,000) nodes whose tail points back
    /// to its head, rooted by a static: the deepest and most cyclic graph a root query can meet.
    /// </summary>
    internal sealed class DeepListScenario : IScenario
    {
        private static LongChainNode s_head;
        private static int s_length;

        public void Build(string[] args)
        {
            s_length = args.Length > 0 ? int.Parse(args[0], CultureInfo.InvariantCulture) : 1_000_000;
            s_head = new LongChainNode { Index = 0 };
            LongChainNode node = s_head;
            for (int i = 1; i < s_length; i++)
            {
                node.Next = new LongChainNode { Index = i };
                node = node.Next;
            }
            node.Next = s_head;
        }

        public void Settle(int attempt)
        {
            if (attempt <= 1) { GC.Collect(); GC.Collect(); }
        }

        public void WriteTruth(Json w)
        {
            LongChainNode tail = s_head;
            for (int i = 1; i < s_length; i++) tail = tail.Next;
            w.Name("deepList").BeginObject();
            w.PropHex("head", Mem.Addr(s_head));
            w.PropHex("tail", Mem.Addr(tail));
            w.Prop("length", s_length);
            w.PropHex("mt", typeof(LongChainNode).TypeHandle.Value);
            w.EndObject();
        }

        public bool OnCommand(string command) => false;
    }
}
