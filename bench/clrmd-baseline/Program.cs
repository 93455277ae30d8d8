using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using Microsoft.Diagnostics.Runtime;

// ClrmdBaseline <core> [stat | type <substring> | gcroot <hex address> | gcroot1 <hex address>]...
// gcroot enumerates every root path to the object; gcroot1 stops at the first one.
// Runs each query on one DataTarget, in order, and prints one JSON line per query with its
// wall time, so a benchmark can compare cold and repeated questions like sosext's.
internal static class Program
{
    private static int Main(string[] args)
    {
        if (args.Length < 2) { Console.Error.WriteLine("usage: ClrmdBaseline <core> stat|type <s>|gcroot <addr> ..."); return 2; }
        var total = Stopwatch.StartNew();
        using DataTarget dt = DataTarget.LoadDump(args[0]);
        // ClrMD 4.2 does not find the DAC of a Linux core by itself here: name the one beside
        // the runtime the core was written by (the same file sosext loads). A with-heap core lacks
        // the page ClrMD reads the runtime version from (it sees 0.0), hence ignoreMismatch.
        ClrInfo clr = dt.ClrVersions[0];
        string dac = System.IO.Path.Combine(System.IO.Path.GetDirectoryName(clr.ModuleInfo.FileName) ?? "", "libmscordaccore.so");
        ClrRuntime runtime = System.IO.File.Exists(dac) ? clr.CreateRuntime(dac, ignoreMismatch: true) : clr.CreateRuntime();
        Console.WriteLine($"{{\"query\":\"open\",\"seconds\":{total.Elapsed.TotalSeconds:F3}}}");
        for (int i = 1; i < args.Length; i++)
        {
            var sw = Stopwatch.StartNew();
            string query = args[i];
            if (query == "stat")
            {
                var stats = new Dictionary<ulong, (int Count, ulong Size)>();
                long objects = 0;
                foreach (ClrObject o in runtime.Heap.EnumerateObjects())
                {
                    objects++;
                    ulong mt = o.Type?.MethodTable ?? 0;
                    stats.TryGetValue(mt, out var s);
                    stats[mt] = (s.Count + 1, s.Size + o.Size);
                }
                Console.WriteLine($"{{\"query\":\"stat\",\"seconds\":{sw.Elapsed.TotalSeconds:F3},\"objects\":{objects},\"types\":{stats.Count}}}");
            }
            else if (query == "type")
            {
                string sub = args[++i];
                long n = runtime.Heap.EnumerateObjects().LongCount(o => o.Type?.Name?.Contains(sub, StringComparison.Ordinal) == true);
                Console.WriteLine($"{{\"query\":\"type\",\"seconds\":{sw.Elapsed.TotalSeconds:F3},\"objects\":{n}}}");
            }
            else if (query == "gcroot1")
            {
                ulong target = Convert.ToUInt64(args[++i].Replace("0x", ""), 16);
                var gcroot = new GCRoot(runtime.Heap, new[] { target });
                int length = 0;
                foreach (var path in gcroot.EnumerateRootPaths()) { for (var link = path.Path; link != null; link = link.Next) length++; break; }
                Console.WriteLine($"{{\"query\":\"gcroot1\",\"seconds\":{sw.Elapsed.TotalSeconds:F3},\"pathLength\":{length}}}");
            }
            else if (query == "gcroot")
            {
                ulong target = Convert.ToUInt64(args[++i].Replace("0x", ""), 16);
                var gcroot = new GCRoot(runtime.Heap, new[] { target });
                int roots = 0;
                foreach (var path in gcroot.EnumerateRootPaths()) roots++;
                Console.WriteLine($"{{\"query\":\"gcroot\",\"seconds\":{sw.Elapsed.TotalSeconds:F3},\"roots\":{roots}}}");
            }
        }
        Console.WriteLine($"{{\"query\":\"total\",\"seconds\":{total.Elapsed.TotalSeconds:F3},\"peakWorkingSetBytes\":{Process.GetCurrentProcess().PeakWorkingSet64}}}");
        return 0;
    }
}
