using System;
using System.Collections.Generic;
using Microsoft.Diagnostics.Runtime;

// ClrmdArm64 <core> <dac> [<os tid>,...]   what ClrMD reads from the core, one tab-separated
// record a line; the threads listed get no stack roots (the DAC's GetStackReferences dies of
// SIGSEGV on a thread dispatching an exception, and the whole process with it):
//   type    <mt hex> <count> <total size> <name>     per MethodTable on the GC heap (ClrObject.Size)
//   thread  <os tid> <managed id> <address hex>      per managed thread
//   root    <os tid> <slot address hex> <object hex> <interior 0/1>   each stack root of the thread
//   noroots <os tid>                                 a listed thread: its roots were not asked for
//   frame   <os tid> <kind> <method or frame name> <ip hex> <sp hex> <MethodDesc hex or 0>
//                                                    each frame of each managed thread's stack
// tests/test_arm64.py compares these with sosext's answers; nothing here is sosext's code.
internal static class Program
{
    private static int Main(string[] args)
    {
        if (args.Length is < 2 or > 3)
        {
            Console.Error.WriteLine("usage: ClrmdArm64 <core> <dac> [<os tid>,...]");
            return 2;
        }
        var noRoots = new HashSet<uint>();
        if (args.Length == 3)
            foreach (string tid in args[2].Split(',', StringSplitOptions.RemoveEmptyEntries))
                noRoots.Add(uint.Parse(tid));
        using DataTarget dt = DataTarget.LoadDump(args[0]);
        using ClrRuntime runtime = dt.ClrVersions[0].CreateRuntime(args[1], ignoreMismatch: true);
        var stats = new SortedDictionary<ulong, (long Count, ulong Size, string Name)>();
        foreach (ClrObject o in runtime.Heap.EnumerateObjects())
        {
            ClrType t = o.Type;
            if (t == null) continue;
            stats.TryGetValue(t.MethodTable, out var s);
            stats[t.MethodTable] = (s.Count + 1, s.Size + o.Size, t.Name ?? "");
        }
        foreach (var (mt, s) in stats)
            Console.WriteLine($"type\t{mt:x}\t{s.Count}\t{s.Size}\t{s.Name}");
        foreach (ClrThread thread in runtime.Threads)
        {
            Console.WriteLine($"thread\t{thread.OSThreadId}\t{thread.ManagedThreadId}\t{thread.Address:x}");
            if (noRoots.Contains(thread.OSThreadId))
                Console.WriteLine($"noroots\t{thread.OSThreadId}");
            else
                foreach (ClrStackRoot root in thread.EnumerateStackRoots())
                    Console.WriteLine($"root\t{thread.OSThreadId}\t{root.Address:x}\t{root.Object.Address:x}\t{(root.IsInterior ? 1 : 0)}");
            foreach (ClrStackFrame frame in thread.EnumerateStackTrace())
            {
                string name = frame.Method != null ? frame.Method.Type?.Name + "." + frame.Method.Name : frame.FrameName;
                ulong md = frame.Method?.MethodDesc ?? 0;
                Console.WriteLine($"frame\t{thread.OSThreadId}\t{frame.Kind}\t{name}\t{frame.InstructionPointer:x}\t{frame.StackPointer:x}\t{md:x}");
            }
        }
        return 0;
    }
}
