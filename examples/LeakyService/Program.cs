using System;
using System.Collections.Generic;
using System.Threading;

namespace LeakyService
{
    /// <summary>What the service caches: a key, a 10,000-byte payload and when it was made.</summary>
    public sealed class CacheEntry
    {
        public string Key;
        public byte[] Payload;
        public DateTime Created;
    }

    /// <summary>A cache that never evicts: the leak.</summary>
    public sealed class MemoryCache
    {
        private readonly Dictionary<string, CacheEntry> _entries = new Dictionary<string, CacheEntry>();
        public int Count { get { lock (_entries) return _entries.Count; } }

        public void Set(string key, CacheEntry entry)
        {
            lock (_entries) _entries[key] = entry;
        }
    }

    /// <summary>A background worker in the style of an IHostedService: a timer calls DoWork.</summary>
    public sealed class CacheWarmupWorker
    {
        private readonly MemoryCache _cache = new MemoryCache();
        private int _next;
        public int Cached => _cache.Count;

        public void DoWork(object state) => Add((int)(state ?? 1));

        public void Add(int count)
        {
            for (int i = 0; i < count; i++)
            {
                int n = Interlocked.Increment(ref _next);
                _cache.Set("customer-" + n, new CacheEntry { Key = "customer-" + n, Payload = new byte[10_000], Created = DateTime.UtcNow });
            }
        }
    }

    public static class Program
    {
        // The static timer keeps the worker (and so its cache) alive for the life of the process.
        private static Timer s_timer;
        private static CacheWarmupWorker s_worker;

        /// <summary>
        /// Usage: LeakyService [--auto N]
        /// With --auto it runs as a service: the timer adds N entries a second and reports each tick;
        /// it never reads the console, so `dotnet LeakyService.dll --auto 50 &` from an interactive
        /// shell keeps running (a background job that reads the terminal is stopped by SIGTTIN).
        /// Without --auto it is driven through stdin: "leak N" adds N entries now, "count" prints
        /// the count, "exit" (or the end of input) quits.
        /// Every answer is one line "LEAKY {json}" so scripts and tests can read it.
        /// </summary>
        public static int Main(string[] args)
        {
            s_worker = new CacheWarmupWorker();
            int perTick = args.Length == 2 && args[0] == "--auto" ? int.Parse(args[1]) : 0;
            s_timer = new Timer(Tick, perTick, perTick > 0 ? 1000 : Timeout.Infinite, perTick > 0 ? 1000 : Timeout.Infinite);
            Report("started");
            if (perTick > 0)
            {
                Thread.Sleep(Timeout.Infinite);  // a service: runs until it is killed
                return 0;
            }
            string line;
            while ((line = Console.ReadLine()) != null)
            {
                string[] words = line.Trim().Split(' ', StringSplitOptions.RemoveEmptyEntries);
                if (words.Length == 0) continue;
                if (words[0] == "exit") break;
                if (words[0] == "leak" && words.Length == 2) s_worker.Add(int.Parse(words[1]));
                Report(words[0]);
            }
            GC.KeepAlive(s_timer);
            return 0;
        }

        private static void Tick(object state)
        {
            s_worker.DoWork(state);
            Report("tick");
        }

        private static void Report(string what)
        {
            Console.WriteLine("LEAKY {\"event\":\"" + what + "\",\"pid\":" + Environment.ProcessId +
                              ",\"cacheEntries\":" + s_worker.Cached +
                              ",\"cacheEntryMT\":\"0x" + typeof(CacheEntry).TypeHandle.Value.ToString("x") + "\"" +
                              ",\"workerMT\":\"0x" + typeof(CacheWarmupWorker).TypeHandle.Value.ToString("x") + "\"}");
            Console.Out.Flush();
        }
    }
}
