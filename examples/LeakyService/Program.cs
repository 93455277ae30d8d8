using System;
using System.Collections.Generic;
using System.Reflection;
using System.Runtime.InteropServices;
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

        /// <summary>The bytes a GC would free with this cache: itself, its dictionary with the
        /// dictionary's arrays, and every entry with its two key strings and its payload.</summary>
        public long RetainedBytes()
        {
            lock (_entries)
            {
                long total = Layout.Size(this) + Layout.Size(_entries);
                foreach (string field in new[] { "_buckets", "_entries" })
                {
                    object array = typeof(Dictionary<string, CacheEntry>)
                        .GetField(field, BindingFlags.NonPublic | BindingFlags.Instance)?.GetValue(_entries);
                    if (array != null) total += Layout.Size(array);
                }
                foreach (KeyValuePair<string, CacheEntry> kv in _entries)
                    total += Layout.Size(kv.Key) + Layout.Size(kv.Value) + Layout.Size(kv.Value.Key) + Layout.Size(kv.Value.Payload);
                return total;
            }
        }
    }

    /// <summary>A customer record, with a name and a small photo.</summary>
    public sealed class Customer
    {
        public string Name;
        public byte[] Photo;
    }

    /// <summary>The second leak: every customer ever seen, in a static list nobody trims.</summary>
    public static class CustomerStore
    {
        private static readonly List<Customer> s_customers = new List<Customer>();
        public static int Count => s_customers.Count;

        public static void Add(int count)
        {
            for (int i = 0; i < count; i++)
                s_customers.Add(new Customer { Name = "customer #" + s_customers.Count, Photo = new byte[1000] });
        }

        /// <summary>The bytes a GC would free with the list: itself, its array, every customer
        /// with its name and photo.</summary>
        public static long RetainedBytes()
        {
            long total = Layout.Size(s_customers);
            object items = typeof(List<Customer>).GetField("_items", BindingFlags.NonPublic | BindingFlags.Instance)
                ?.GetValue(s_customers);
            if (items != null) total += Layout.Size(items);
            foreach (Customer c in s_customers)
                total += Layout.Size(c) + Layout.Size(c.Name) + Layout.Size(c.Photo);
            return total;
        }
    }

    /// <summary>What a native data target hands back: a buffer.</summary>
    public sealed class DataTarget
    {
        public byte[] Buffer;
    }

    /// <summary>The third leak: a wrapper given to native code through a strong GC handle
    /// that is never freed.</summary>
    public sealed class DacWrapper
    {
        public DataTarget Target;

        private static int s_count;
        public static int Count => s_count;

        /// <summary>Leaks <paramref name="count"/> wrappers; returns the bytes each one retains.</summary>
        public static long Leak(int count)
        {
            long each = 0;
            for (int i = 0; i < count; i++)
            {
                var w = new DacWrapper { Target = new DataTarget { Buffer = new byte[4096] } };
                GCHandle.Alloc(w, GCHandleType.Normal);
                s_count++;
                each = Layout.Size(w) + Layout.Size(w.Target) + Layout.Size(w.Target.Buffer);
            }
            return each;
        }
    }

    /// <summary>Object sizes as the runtime lays them out (and as dumpheap adds them): the
    /// MethodTable's base size plus length times its component size, not rounded up, at least 24.</summary>
    internal static class Layout
    {
        public static long Size(object o)
        {
            IntPtr mt = o.GetType().TypeHandle.Value;
            uint flags = (uint)Marshal.ReadInt32(mt);
            long size = Marshal.ReadInt32(mt, 4);
            if ((flags & 0x80000000) != 0)  // the low 16 bits are the component size
                size += (flags & 0xFFFF) * (o is string s ? s.Length : ((Array)o).LongLength);
            return Math.Max(size, 24);
        }
    }

    /// <summary>A background worker in the style of an IHostedService: a timer calls DoWork.</summary>
    public sealed class CacheWarmupWorker
    {
        private readonly MemoryCache _cache = new MemoryCache();
        private int _next;
        public int Cached => _cache.Count;
        public long CacheRetained => _cache.RetainedBytes();

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
        /// Usage: LeakyService [--auto N]  — with --auto, the timer adds N entries a second.
        /// Stdin commands: "leak N" adds N entries now, "customers N" adds N customers to the
        /// static store, "wrappers N" leaks N handle-held wrappers, "count" prints the counts, "exit" quits.
        /// Every answer is one line "LEAKY {json}" so scripts and tests can read it.
        /// </summary>
        public static int Main(string[] args)
        {
            s_worker = new CacheWarmupWorker();
            int perTick = args.Length == 2 && args[0] == "--auto" ? int.Parse(args[1]) : 0;
            s_timer = new Timer(s_worker.DoWork, perTick, perTick > 0 ? 1000 : Timeout.Infinite, perTick > 0 ? 1000 : Timeout.Infinite);
            Report("started");
            string line;
            while ((line = Console.ReadLine()) != null)
            {
                string[] words = line.Trim().Split(' ', StringSplitOptions.RemoveEmptyEntries);
                if (words.Length == 0) continue;
                if (words[0] == "exit") break;
                if (words[0] == "leak" && words.Length == 2) s_worker.Add(int.Parse(words[1]));
                if (words[0] == "customers" && words.Length == 2) CustomerStore.Add(int.Parse(words[1]));
                if (words[0] == "wrappers" && words.Length == 2) s_wrapperRetained = DacWrapper.Leak(int.Parse(words[1]));
                Report(words[0]);
            }
            GC.KeepAlive(s_timer);
            return 0;
        }

        private static long s_wrapperRetained;

        private static void Report(string what)
        {
            Console.WriteLine("LEAKY {\"event\":\"" + what + "\",\"pid\":" + Environment.ProcessId +
                              ",\"cacheEntries\":" + s_worker.Cached +
                              ",\"cacheRetained\":" + s_worker.CacheRetained +
                              ",\"customers\":" + CustomerStore.Count + ",\"customersRetained\":" + CustomerStore.RetainedBytes() +
                              ",\"wrappers\":" + DacWrapper.Count + ",\"wrapperRetained\":" + s_wrapperRetained +
                              ",\"cacheEntryMT\":\"0x" + typeof(CacheEntry).TypeHandle.Value.ToString("x") + "\"" +
                              ",\"workerMT\":\"0x" + typeof(CacheWarmupWorker).TypeHandle.Value.ToString("x") + "\"}");
            Console.Out.Flush();
        }
    }
}
