using System;
using System.Collections.Generic;
using System.Threading;

// Types of the `roots` scenario: the retention chains gcroot must find, each made of types unique
// to this program so the tests can recognise every link.
namespace SosextDebuggee
{
    // Leak 1: cache entries held by the MemoryCache of a hosted worker that a timer keeps alive.
    public sealed class CacheEntry
    {
        public int Key;
        public byte[] Payload;
        public DateTime Created;
    }

    public sealed class MemoryCache
    {
        public readonly Dictionary<int, CacheEntry> Entries = new Dictionary<int, CacheEntry>(64);
    }

    public sealed class HostedWorker
    {
        public readonly MemoryCache Cache = new MemoryCache();
        public int Ticks;

        public void OnTimer(object state) => Interlocked.Increment(ref Ticks);
    }

    // Leak 2: customer names held by the cache of a processor that lives in a thread's local.
    public sealed class Customer
    {
        public int Id;
        public string Name;
    }

    public sealed class Processor
    {
        public readonly Dictionary<int, Customer> Cache = new Dictionary<int, Customer>(16);
    }

    // Leak 3: a data-target wrapper behind a strong GC handle, five objects down.
    public sealed class HandleLink1 { public HandleLink2 Next; }
    public sealed class HandleLink2 { public HandleLink3 Next; }
    public sealed class HandleLink3 { public HandleLink4 Next; }
    public sealed class HandleLink4 { public DataTargetWrapper Next; }
    public sealed class DataTargetWrapper { public long Handle = 0x5050; }

    public sealed class NamedLocalItem { public int Value = 7; }
    public struct PinnedBlob { public long A, B; }
    public sealed class WeakOnlyItem { public int Value; }
    public sealed class DependentPrimary { public int Value; }
    public sealed class DependentSecondary { public int Value; }

    /// <summary>Its finalizer blocks the finalizer thread for good, so the finalizer queue keeps what follows it.</summary>
    public sealed class FinalizerBlocker
    {
        internal static readonly ManualResetEventSlim Entered = new ManualResetEventSlim(false, 0);
        internal static readonly ManualResetEventSlim Release = new ManualResetEventSlim(false, 0);
        internal static FinalizerBlocker Resurrected;  // so its liveness does not depend on the JIT

        ~FinalizerBlocker()
        {
            Resurrected = this;
            Entered.Set();
            Release.Wait();
        }
    }

    /// <summary>Finalizable, unreachable: waits in the ready-for-finalization queue holding its target.</summary>
    public sealed class FinalizerOnlyHolder
    {
        public FinalizerOnlyTarget Target;
        ~FinalizerOnlyHolder() => GC.KeepAlive(Target);
    }

    public sealed class FinalizerOnlyTarget { public int Value = 99; }

    public static class RootedGenericStatic<T> where T : class
    {
        public static T Value;
    }

    public sealed class LockTarget { public int Value; }

    public sealed class LongChainNode
    {
        public LongChainNode Next;
        public int Index;
    }

    public sealed class GenericStaticItem { public int Value = 5; }

    public sealed class RootsTestException : Exception
    {
        public RootsTestException(string message) : base(message) { }
    }
}
