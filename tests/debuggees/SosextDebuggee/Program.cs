using System;

namespace DebuggeeHost
{
    /// <summary>A heap to build and describe. The protocol around it lives in <see cref="Program"/>.</summary>
    internal interface IScenario
    {
        /// <summary>Allocates the long-lived part of the heap (rooted in static fields).</summary>
        void Build(string[] args);

        /// <summary>(Re)establishes the GC state the truth describes: generations, garbage. Called before
        /// every gathering; <paramref name="attempt"/> 0 is a warm-up whose truth is thrown away.</summary>
        void Settle(int attempt);

        /// <summary>Writes the scenario's members of the truth object. Must not allocate test-type objects.</summary>
        void WriteTruth(Json w);

        /// <summary>Handles a stdin command other than exit/ping; false if unknown.</summary>
        bool OnCommand(string command);
    }

    internal static class Program
    {
        private const int MaxAttempts = 10;

        private static IScenario Create(string name) => name switch
        {
            "heap" => new HeapScenario(),
            "stresslog" => new StressLogScenario(),
            "bigheap" => new BigHeapScenario(),
            "leakheap" => new LeakHeapScenario(),
            "fields" => new FieldsScenario(),
            "roots" => new RootsScenario(),
            "threads" => new ThreadsScenario(),
            "deeplist" => new DeepListScenario(),
            "hostile" => new HostileScenario(),
            "source" => new SourceScenario(),
            "counters" => new CountersScenario(),
            "parity" => new ParityScenario(),
            "dcdscript" => new DcdScriptScenario(),
            "retained" => new RetainedScenario(),
            "stackvalues" => new StackValuesScenario(),
            "crash" => new CrashScenario(),
            "extraheap" => new ExtraHeapScenario(),
            "code" => new CodeScenario(),
            "gcscripts" => new GcScriptsScenario(),
            "sosscripts" => new ScriptsScenario(),
            "reflectlines" => new ReflectLinesScenario(),
            "http" => new HttpScenario(),
            _ => null,
        };

        private static void Log(string message) => Console.Out.WriteLine("SOSEXT-LOG " + message);

        private static int Main(string[] args)
        {
            IScenario scenario = args.Length > 0 ? Create(args[0]) : null;
            if (scenario == null)
            {
                Console.Error.WriteLine("usage: SosextDebuggee <heap|bigheap [N]> ; then stdin commands: exit, ping");
                return 2;
            }
            try
            {
                return Run(scenario, args[0], args[1..]);
            }
            catch (Exception e)
            {
                // Exit cleanly instead of aborting (an unhandled exception would SIGABRT and may dump core).
                Console.Error.WriteLine("SOSEXT-FATAL " + e);
                Console.Out.WriteLine("SOSEXT-FATAL " + e.GetType().Name + ": " + e.Message.Replace('\n', ' '));
                return 3;
            }
        }

        private static int Run(IScenario scenario, string name, string[] args)
        {
            Log($"scenario {name} pid {Environment.ProcessId}");
            // Create the stdin reader now: after SOSEXT-READY the only thing left is to block in it.
            _ = Console.In;
            SizeChecks.Run();
            scenario.Build(args);

            // Warm-up: JIT and static constructors used while gathering run here, not in the window
            // between the last GC and the print.
            scenario.Settle(0);
            BuildTruth(scenario, name, 0, GcCounts.Now());

            bool stable = false;
            for (int attempt = 1; attempt <= MaxAttempts && !stable; attempt++)
            {
                scenario.Settle(attempt);
                GcCounts before = GcCounts.Now();
                string json = BuildTruth(scenario, name, attempt, before);
                Console.Out.Write("SOSEXT-TRUTH ");
                Console.Out.WriteLine(json);
                Console.Out.Flush();
                // A GC while gathering or printing may have moved objects: the printed addresses
                // would be stale, so settle and print again (the harness keeps the last truth).
                stable = GcCounts.Now() == before;
                if (!stable) Log($"a GC ran during attempt {attempt}; gathering again");
            }
            if (!stable)
            {
                Console.Out.WriteLine($"SOSEXT-FATAL a GC kept running while gathering ({MaxAttempts} attempts)");
                return 4;
            }
            Console.Out.WriteLine("SOSEXT-READY");
            Console.Out.Flush();
            return CommandLoop(scenario);
        }

        private static string BuildTruth(IScenario scenario, string name, int attempt, GcCounts counts)
        {
            var w = new Json();
            w.BeginObject();
            w.Prop("schema", 1);
            w.Prop("scenario", name);
            w.Prop("attempt", attempt);
            Truth.WriteRuntime(w, counts);
            SizeChecks.Write(w);
            scenario.WriteTruth(w);
            w.EndObject();
            return w.ToString();
        }

        private static int CommandLoop(IScenario scenario)
        {
            string line;
            while ((line = Console.In.ReadLine()) != null)
            {
                string command = line.Trim();
                if (command.Length == 0) continue;
                if (command == "exit") return 0;
                if (command == "ping") Console.Out.WriteLine("SOSEXT-PONG");
                else if (!scenario.OnCommand(command)) Console.Out.WriteLine("SOSEXT-ERROR unknown command: " + command);
                Console.Out.Flush();
            }
            return 0; // EOF on stdin: the harness went away
        }
    }
}
