using System;

// Types of the `threads` scenario: each one exists only here, so a test can find its instances
// (arguments, locals, exceptions) by type name without meeting anything else.
namespace SosextDebuggee
{
    /// <summary>The exception the thrower thread throws and catches; the scenario keeps it in a static.</summary>
    public sealed class TestException : Exception
    {
        public const int TestHResult = unchecked((int)0x80131577);

        public TestException(string message, Exception inner) : base(message, inner)
        {
            HResult = TestHResult;
        }
    }

    /// <summary>The inner exception of <see cref="TestException"/>; never thrown, only attached.</summary>
    public sealed class InnerTestException : Exception
    {
        public InnerTestException(string message) : base(message) { }
    }

    /// <summary>The object passed as Level2's argument.</summary>
    public sealed class ThreadsArgItem
    {
        public int Marker;
        public ThreadsArgItem(int marker) { Marker = marker; }
    }

    /// <summary>The local held by Level3 while its thread waits.</summary>
    public sealed class ThreadsLocalItem
    {
        public long Marker;
        public ThreadsLocalItem(long marker) { Marker = marker; }
    }

    /// <summary>Not an exception: `pe` of one of these must refuse politely.</summary>
    public sealed class NotAnException
    {
        public int Value = 5;
    }
}
