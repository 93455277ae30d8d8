using System;
using System.Reflection;
using System.Reflection.Emit;
using System.Threading;
using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `hostile`: target-derived text that would rewrite a terminal if printed raw. A string with
    /// OSC (ESC ] 0;pwned BEL), a clear-screen CSI (ESC [ 2J), the 8-bit CSI U+009B, a tab, a CR
    /// and DEL; a string with a lone surrogate; a thread named with an escape; an exception whose
    /// message holds OSC; and an instance of a type made with Reflection.Emit whose name holds
    /// ESC and U+009B. The truth gives each object's address and the exact text.
    /// </summary>
    internal sealed class HostileScenario : IScenario
    {
        private static string s_text, s_surrogate, s_threadName;
        private static Exception s_exception;
        private static object s_emitted;
        private static Thread s_thread;
        private static readonly ManualResetEventSlim s_block = new ManualResetEventSlim(false, 0);

        public void Build(string[] args)
        {
            // Concat: literals may live in the frozen (non-GC) heap; these must be ordinary objects.
            s_text = string.Concat("sosext-hostile ", "\u001b]0;pwned\u0007 \u001b[2J \u009b31m", " tab\there cr\rdel\u007f end");
            s_surrogate = string.Concat("sosext-lone-", "\ud800", "-surrogate");
            s_threadName = string.Concat("sosext-\u001b[31m", "red\u0007");
            s_exception = new InvalidOperationException(string.Concat("sosext-hostile-message ", "\u001b]0;pwned\u0007"));

            AssemblyBuilder ab = AssemblyBuilder.DefineDynamicAssembly(new AssemblyName("SosextHostileEmit"), AssemblyBuilderAccess.Run);
            ModuleBuilder mb = ab.DefineDynamicModule("SosextHostileEmit");
            TypeBuilder tb = mb.DefineType("SosextEvil\u001bc\u009bType\u0007", TypeAttributes.Public | TypeAttributes.Class);
            s_emitted = Activator.CreateInstance(tb.CreateType());

            s_thread = new Thread(() => s_block.Wait()) { Name = s_threadName, IsBackground = true };
            s_thread.Start();
        }

        public void Settle(int attempt)
        {
            if (attempt <= 1) { GC.Collect(); GC.Collect(); }
        }

        public void WriteTruth(Json w)
        {
            w.Name("hostile").BeginObject();
            w.PropHex("text", Mem.Addr(s_text));
            w.Prop("textValue", s_text);
            w.PropHex("surrogate", Mem.Addr(s_surrogate));
            w.Prop("surrogateValue", s_surrogate);
            w.PropHex("threadName", Mem.Addr(s_threadName));
            w.Prop("threadNameValue", s_threadName);
            w.PropHex("exception", Mem.Addr(s_exception));
            w.Prop("exceptionMessage", s_exception.Message);
            w.PropHex("emitted", Mem.Addr(s_emitted));
            w.PropHex("emittedMt", s_emitted.GetType().TypeHandle.Value);
            w.Prop("emittedType", s_emitted.GetType().FullName);
            w.EndObject();
        }

        public bool OnCommand(string command) => false;
    }
}
