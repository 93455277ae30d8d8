using System;
using System.Collections.Generic;
using System.Linq;
using Microsoft.Diagnostics.Runtime;

// ClrmdNames heap <core>   one line per MethodTable on the core's GC heap: "<mt hex>\t<ClrType.Name>"
// ClrmdNames parse         one line per line of stdin: ClrMD's parse of that DAC-style type name
// tests/test_typenames.py compares these with sosext's names; nothing here is sosext's code.
internal static class Program
{
    private static int Main(string[] args)
    {
        if (args.Length >= 2 && args[0] == "heap")
            return Heap(args[1]);
        if (args.Length == 1 && args[0] == "parse")
            return Parse();
        Console.Error.WriteLine("usage: ClrmdNames heap <core> | parse");
        return 2;
    }

    private static int Heap(string core)
    {
        using DataTarget dt = DataTarget.LoadDump(core);
        ClrInfo clr = dt.ClrVersions[0];
        // As in bench/clrmd-baseline: ClrMD does not find a Linux core's DAC by itself here.
        string dac = System.IO.Path.Combine(System.IO.Path.GetDirectoryName(clr.ModuleInfo.FileName) ?? "", "libmscordaccore.so");
        using ClrRuntime runtime = System.IO.File.Exists(dac) ? clr.CreateRuntime(dac, ignoreMismatch: true) : clr.CreateRuntime();
        var names = new SortedDictionary<ulong, string>();
        foreach (ClrObject o in runtime.Heap.EnumerateObjects())
        {
            ClrType t = o.Type;
            if (t != null && !names.ContainsKey(t.MethodTable))
                names[t.MethodTable] = t.Name ?? "";
        }
        foreach (var (mt, name) in names)
            Console.WriteLine($"{mt:x}\t{name}");
        return 0;
    }

    private static int Parse()
    {
        // DacNameParser is internal; ClrMD exposes it to its own tests as a public static
        // helper on a type in the implementation namespace. Find it by its signature.
        var parse = typeof(ClrType).Assembly.GetTypes()
            .SelectMany(t => t.GetMethods(System.Reflection.BindingFlags.Static | System.Reflection.BindingFlags.Public | System.Reflection.BindingFlags.NonPublic))
            .FirstOrDefault(m => m.DeclaringType.Name.StartsWith("DacNameParser", StringComparison.OrdinalIgnoreCase) && m.Name == "Parse"
                                 && m.GetParameters().Length == 1 && m.GetParameters()[0].ParameterType == typeof(string));
        if (parse == null) { Console.Error.WriteLine("ClrMD's DacNameParser.Parse not found"); return 3; }
        string line;
        while ((line = Console.In.ReadLine()) != null)
            Console.WriteLine((string)parse.Invoke(null, new object[] { line }));
        return 0;
    }
}
