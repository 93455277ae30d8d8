// Debuggee for the diagnostics-IPC live tests: announce the pid as one JSON line,
// then wait until the harness closes stdin (or writes a line) so it can be inspected.
using System;

internal static class Program
{
    private static int Main()
    {
        int pid = Environment.ProcessId;
        Console.Out.WriteLine("{\"pid\": " + pid + "}");
        Console.Out.Flush();
        Console.ReadLine();
        return 0;
    }
}
