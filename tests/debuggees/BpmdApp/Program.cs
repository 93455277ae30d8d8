using System;
using System.Diagnostics;
using System.IO;
using System.Reflection.Metadata;
using System.Reflection.Metadata.Ecma335;
using System.Runtime.CompilerServices;
using System.Text;

namespace BpmdApp
{
    /// <summary>
    /// Runs two methods once and exits, printing one BPMDAPP-TRUTH line of JSON: the line each
    /// method says it is on (its own StackFrame, read from the PDB by the runtime) and each
    /// method's sequence points (IL offset, line) as the compiler wrote them, read with the
    /// framework's PDB reader. `bpmd` is set on them before the runtime is even loaded. ByOffset
    /// also makes the process's first call of StackFrame.GetFileColumnNumber, whose code is
    /// System.Private.CoreLib's precompiled (ReadyToRun) code, never JIT-compiled.
    /// </summary>
    public static class Program
    {
        public static int LineSeen, OffsetSeen, ColumnSeen;

        public static int Main(string[] args)
        {
            int total = ByLine(3) + ByOffset(5);
            var json = new StringBuilder("{");
            json.Append($"\"lineSeen\":{LineSeen},\"offsetSeen\":{OffsetSeen},\"columnSeen\":{ColumnSeen},\"total\":{total}");
            json.Append($",\"byLine\":{Points(nameof(ByLine))},\"byOffset\":{Points(nameof(ByOffset))}}}");
            Console.Out.WriteLine("BPMDAPP-TRUTH " + json);
            return 0;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int ByLine(int x)
        {
            int y = x * 7;
            LineSeen = new StackFrame(0, true).GetFileLineNumber(); // bpmd-line
            return y + LineSeen;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int ByOffset(int x)
        {
            int y = x * 11;
            StackFrame frame = new StackFrame(0, true); // bpmd-offset
            OffsetSeen = frame.GetFileLineNumber();
            ColumnSeen = frame.GetFileColumnNumber(); // bpmd-corelib: first call of a ReadyToRun method
            return y + OffsetSeen;
        }

        /// <summary>The method's visible sequence points as [[IL offset, line], ...].</summary>
        private static string Points(string method)
        {
            string pdb = Path.ChangeExtension(typeof(Program).Assembly.Location, ".pdb");
            using var provider = MetadataReaderProvider.FromPortablePdbStream(File.OpenRead(pdb));
            MetadataReader reader = provider.GetMetadataReader();
            int token = typeof(Program).GetMethod(method).MetadataToken;
            var info = reader.GetMethodDebugInformation(MetadataTokens.MethodDebugInformationHandle(token & 0xFFFFFF));
            var sb = new StringBuilder("[");
            foreach (SequencePoint p in info.GetSequencePoints())
            {
                if (p.IsHidden) continue;
                if (sb.Length > 1) sb.Append(',');
                sb.Append($"[{p.Offset},{p.StartLine}]");
            }
            return sb.Append(']').ToString();
        }
    }
}
