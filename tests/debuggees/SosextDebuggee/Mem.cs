using System;
using System.IO;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace DebuggeeHost
{
    /// <summary>Object addresses and sizes as the runtime itself sees them (x64 layout).</summary>
    internal static unsafe class Mem
    {
        // MethodTable flag: the low 16 bits of the flags word hold the component size.
        public const uint HasComponentSize = 0x80000000;

        // Lets us take a GC-tracked byref to the first byte after the MethodTable pointer of any object.
        private sealed class RawData { public byte Data; }

        /// <summary>The address of <paramref name="o"/> now. Only valid until the next GC.</summary>
        // NoInlining keeps the reinterpreted parameter in this frame, so callers' locals are not
        // made address-exposed (which would keep them reported live for a whole method).
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static nint Addr(object o) => Unsafe.As<object, nint>(ref o);

        /// <summary>Address of the object in a reference slot; taking <c>ref slot</c> pins the caller's
        /// local to a stack slot (address-exposed), which is what the stack-root scenarios want.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static nint AddrOfSlot<T>(ref T slot) where T : class => Unsafe.As<T, nint>(ref slot);

        private static ref byte DataRef(object o) => ref Unsafe.As<RawData>(o).Data;

        /// <summary>The MethodTable pointer stored in the object's first word (read through a GC-safe byref).</summary>
        public static nint MethodTableOf(object o) => Unsafe.Add(ref Unsafe.As<byte, nint>(ref DataRef(o)), -1);

        /// <summary>The u32 at obj+8: the element count of arrays (all dimensions) and the length of strings.</summary>
        public static uint RawLength(object o) => Unsafe.As<byte, uint>(ref DataRef(o));

        /// <summary>Offset of a field from the object address (the MethodTable pointer), as SOS prints it.</summary>
        public static long FieldOffset<T>(object o, ref T field) =>
            (long)Unsafe.ByteOffset(ref DataRef(o), ref Unsafe.As<T, byte>(ref field)) + IntPtr.Size;

        public static uint MtFlags(nint mt) => *(uint*)mt;
        public static uint MtBaseSize(nint mt) => *(uint*)(mt + 4);
        public static uint MtComponentSize(nint mt) => (MtFlags(mt) & HasComponentSize) != 0 ? MtFlags(mt) & 0xFFFF : 0;

        /// <summary>Size on the heap: align8(BaseSize + ComponentSize * length), all from the MethodTable.</summary>
        public static long SizeOf(object o)
        {
            nint mt = MethodTableOf(o);
            long size = MtBaseSize(mt);
            uint component = MtComponentSize(mt);
            if (component != 0)
                size += (long)component * RawLength(o);
            return (size + 7) & ~7L;
        }

        /// <summary>BaseSize + ComponentSize * length, not aligned, at least 24: what ClrMD's ClrObject.Size
        /// (and so SOS's dumpheap/dumpobj) report. It differs from <see cref="SizeOf"/> only for arrays and strings.</summary>
        public static long UnalignedSizeOf(object o)
        {
            nint mt = MethodTableOf(o);
            long size = MtBaseSize(mt) + (long)MtComponentSize(mt) * (MtComponentSize(mt) != 0 ? RawLength(o) : 0);
            return Math.Max(size, MinObjectSize);
        }

        public const int MinObjectSize = 24;

        /// <summary>Checks that the object's header word is the MethodTable of its type; a mismatch means
        /// our idea of object layout is wrong and any truth we print would be too.</summary>
        public static nint CheckedMethodTable(object o)
        {
            nint mt = MethodTableOf(o);
            nint expected = o.GetType().TypeHandle.Value;
            if (mt != expected)
                throw new InvalidOperationException($"MethodTable mismatch for {o.GetType()}: header {mt:x} != TypeHandle {expected:x}");
            return mt;
        }

        public static string Hex(nint value) => "0x" + ((ulong)value).ToString("x");

        // x86_64 gettid; used only if /proc/thread-self is unreadable.
        [DllImport("libc", EntryPoint = "syscall")]
        private static extern long Syscall(long number);

        /// <summary>The OS thread id of the calling thread.</summary>
        public static int CurrentOsTid()
        {
            try
            {
                // "/proc/thread-self" -> "<pid>/task/<tid>"
                string target = new FileInfo("/proc/thread-self").LinkTarget;
                if (target != null)
                {
                    int slash = target.LastIndexOf('/');
                    return int.Parse(target.AsSpan(slash + 1));
                }
            }
            catch (IOException) { }
            catch (UnauthorizedAccessException) { }
            return (int)Syscall(186);
        }
    }
}
