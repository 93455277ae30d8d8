using System;
using System.Collections.Generic;
using System.Reflection;
using System.Reflection.Metadata;
using System.Reflection.Metadata.Ecma335;
using System.Reflection.Emit;
using System.Runtime.CompilerServices;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>Caught by CodeScenario.CodeSubject's typed clause.</summary>
    public sealed class CodeTestException : Exception
    {
        public CodeTestException(string message) : base(message) { }
    }

    /// <summary>
    /// `code`: one jitted method of known IL, for clru, dumpil, ehinfo, gcinfo and dumpsig.
    /// CodeSubject has a typed catch, a filter and a finally (nested in the finally's try) and
    /// calls CodeCallee; both are compiled (PrepareMethod, fully optimized: no tiers) and run
    /// once. The truth gives what reflection knows: the MethodDescs, the IL bytes, the IL
    /// exception clauses, the entry point, and where the signature blob of CodeSubject lies in
    /// the module's metadata in memory (System.Reflection.Metadata over the raw metadata).
    /// </summary>
    internal sealed class CodeScenario : IScenario
    {
        private static int s_sink;
        private static long s_total;

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.AggressiveOptimization)]
        public static int CodeCallee(int x) => x * 3 + s_sink;

        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.AggressiveOptimization)]
        public static int CodeSubject(string text, int count, List<int> list, ref long total)
        {
            int result = 0;
            try
            {
                try
                {
                    result = CodeCallee(count) + text.Length;
                    list.Add(result);
                }
                catch (CodeTestException e)
                {
                    result = -e.Message.Length;
                }
                catch (InvalidOperationException) when (count > 5)
                {
                    result = -2;
                }
            }
            finally
            {
                total += result;
                s_sink++;
            }
            switch (count)
            {
                case 0: result++; break;
                case 1: result--; break;
                case 2: result += 10; break;
            }
            return result;
        }

        // Optimized, no loop and no EH: partially interruptible, its GC info lists a safe point
        // per call (gcinfo's safe points are the return addresses of the calls clru shows).
        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.AggressiveOptimization)]
        public static string CodeCaller(string text, object keep)
        {
            int n = CodeCallee(text.Length);
            string s = string.Concat(text, n.ToString());
            GC.KeepAlive(keep);
            return s;
        }

        // A typed catch of another module's type (a TypeRef to CoreLib's exception).
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int CodeCatcher(string text)
        {
            try
            {
                return int.Parse(text);
            }
            catch (FormatException)
            {
                return -1;
            }
        }

        // A DynamicMethod (its IL lives in managed objects): length of the argument plus the
        // length of a literal, through CodeCallee.
        private const string DynamicLiteral = "sosext-dynamic-il";
        private static DynamicMethod s_dynamic;
        private static Func<string, int> s_dynamicDelegate;
        // No initializers on this class's statics: a static constructor would change the code
        // the JIT makes for CodeSubject (class-initialization checks), which the docs show.
        private static List<string> s_dynamicOpcodes;

        private static void EmitDynamic()
        {
            s_dynamicOpcodes = new List<string>();
            var dm = new DynamicMethod("CodeDynamic", typeof(int), new[] { typeof(string) }, typeof(CodeScenario).Module);
            ILGenerator il = dm.GetILGenerator();
            MethodInfo length = typeof(string).GetProperty(nameof(string.Length)).GetGetMethod();
            void Emit(OpCode op, object arg = null)
            {
                s_dynamicOpcodes.Add(op.Name);
                if (arg is MethodInfo m) il.Emit(op, m);
                else if (arg is string text) il.Emit(op, text);
                else il.Emit(op);
            }
            Emit(OpCodes.Ldarg_0);
            Emit(OpCodes.Callvirt, length);
            Emit(OpCodes.Ldstr, DynamicLiteral);
            Emit(OpCodes.Callvirt, length);
            Emit(OpCodes.Add);
            Emit(OpCodes.Call, Callee);
            Emit(OpCodes.Ret);
            s_dynamicDelegate = (Func<string, int>)dm.CreateDelegate(typeof(Func<string, int>));
            s_dynamic = dm;
        }

        private static MethodInfo Subject => typeof(CodeScenario).GetMethod(nameof(CodeSubject));
        private static MethodInfo Callee => typeof(CodeScenario).GetMethod(nameof(CodeCallee));
        private static MethodInfo Caller => typeof(CodeScenario).GetMethod(nameof(CodeCaller));
        private static MethodInfo Catcher => typeof(CodeScenario).GetMethod(nameof(CodeCatcher));

        public void Build(string[] args)
        {
            foreach (MethodInfo m in new[] { Callee, Subject, Caller, Catcher })
                RuntimeHelpers.PrepareMethod(m.MethodHandle);
            s_sink += CodeCatcher("7");  // no exception thrown: the thread keeps no last exception
            CodeSubject("sosext", 2, new List<int>(), ref s_total);
            GC.KeepAlive(CodeCaller("sosext", s_total));
            EmitDynamic();
            s_sink += s_dynamicDelegate("sosext");
        }

        public void Settle(int attempt)
        {
            GC.Collect();
        }

        private static string Hex(byte[] bytes) => Convert.ToHexString(bytes).ToLowerInvariant();

        private static unsafe (nint address, int length) SignatureBlob(MethodInfo m)
        {
            if (!m.Module.Assembly.TryGetRawMetadata(out byte* blob, out int length))
                return (0, 0);
            var reader = new MetadataReader(blob, length);
            var handle = (MethodDefinitionHandle)MetadataTokens.Handle(m.MetadataToken);
            BlobReader sig = reader.GetBlobReader(reader.GetMethodDefinition(handle).Signature);
            return ((nint)sig.StartPointer, sig.Length);
        }

        /// <summary>The IL decoded with reflection's own opcode table (System.Reflection.Emit.OpCodes):
        /// each instruction's offset and name, independent of sosext's table.</summary>
        private static List<(int offset, string name)> DecodeWithReflection(byte[] il)
        {
            var table = new Dictionary<short, OpCode>();
            foreach (FieldInfo f in typeof(OpCodes).GetFields(BindingFlags.Public | BindingFlags.Static))
                if (f.GetValue(null) is OpCode op)
                    table[op.Value] = op;
            var list = new List<(int, string)>();
            int pos = 0;
            while (pos < il.Length)
            {
                int start = pos;
                short value = il[pos++];
                if (value == 0xFE)
                    value = (short)(0xFE00 | il[pos++]);
                OpCode op = table[value];
                list.Add((start, op.Name));
                switch (op.OperandType)
                {
                    case OperandType.InlineNone: break;
                    case OperandType.ShortInlineBrTarget:
                    case OperandType.ShortInlineI:
                    case OperandType.ShortInlineVar: pos += 1; break;
                    case OperandType.InlineVar: pos += 2; break;
                    case OperandType.InlineI8:
                    case OperandType.InlineR: pos += 8; break;
                    case OperandType.InlineSwitch: pos += 4 + 4 * BitConverter.ToInt32(il, pos); break;
                    default: pos += 4; break;
                }
            }
            return list;
        }

        public void WriteTruth(Json w)
        {
            MethodInfo subject = Subject, callee = Callee;
            MethodBody body = subject.GetMethodBody();
            w.Name("code").BeginObject();
            w.PropHex("methodDesc", subject.MethodHandle.Value);
            w.Prop("token", subject.MetadataToken);
            w.PropHex("entry", subject.MethodHandle.GetFunctionPointer());
            w.Prop("method", typeof(CodeScenario).FullName + "." + nameof(CodeSubject));
            w.Prop("il", Hex(body.GetILAsByteArray()));
            w.Prop("maxStack", body.MaxStackSize);
            w.Name("instructions").BeginArray();
            foreach ((int offset, string name) in DecodeWithReflection(body.GetILAsByteArray()))
            {
                w.BeginObject();
                w.Prop("offset", offset);
                w.Prop("opcode", name);
                w.EndObject();
            }
            w.EndArray();
            w.Name("clauses").BeginArray();
            foreach (ExceptionHandlingClause c in body.ExceptionHandlingClauses)
            {
                w.BeginObject();
                w.Prop("flags", c.Flags.ToString());
                w.Prop("tryOffset", c.TryOffset);
                w.Prop("tryLength", c.TryLength);
                w.Prop("handlerOffset", c.HandlerOffset);
                w.Prop("handlerLength", c.HandlerLength);
                w.Prop("catchType", c.Flags == ExceptionHandlingClauseOptions.Clause ? c.CatchType.FullName : null);
                w.Prop("filterOffset", c.Flags == ExceptionHandlingClauseOptions.Filter ? c.FilterOffset : -1);
                w.EndObject();
            }
            w.EndArray();
            w.Name("callee").BeginObject();
            w.PropHex("methodDesc", callee.MethodHandle.Value);
            w.Prop("token", callee.MetadataToken);
            w.Prop("method", typeof(CodeScenario).FullName + "." + nameof(CodeCallee));
            w.EndObject();
            w.Name("dynamic").BeginObject();
            w.PropHex("address", Mem.Addr(s_dynamic));
            w.Prop("literal", DynamicLiteral);
            w.Name("opcodes").BeginArray();
            foreach (string op in s_dynamicOpcodes)
                w.Value(op);
            w.EndArray();
            w.EndObject();
            w.Name("catcher").BeginObject();
            w.PropHex("methodDesc", Catcher.MethodHandle.Value);
            w.Prop("catchType", Catcher.GetMethodBody().ExceptionHandlingClauses[0].CatchType.FullName);
            w.EndObject();
            w.Name("caller").BeginObject();
            w.PropHex("methodDesc", Caller.MethodHandle.Value);
            w.Prop("method", typeof(CodeScenario).FullName + "." + nameof(CodeCaller));
            w.EndObject();
            (nint sig, int sigLength) = SignatureBlob(subject);
            w.Name("signature").BeginObject();
            w.PropHex("address", sig);
            w.Prop("length", sigLength);
            w.Name("parameters").BeginArray();
            foreach (ParameterInfo p in subject.GetParameters())
            {
                Type t = p.ParameterType.IsByRef ? p.ParameterType.GetElementType() : p.ParameterType;
                w.BeginObject();
                w.Prop("type", t.IsGenericType ? t.GetGenericTypeDefinition().FullName : t.FullName);
                w.Prop("byRef", p.ParameterType.IsByRef);
                w.Name("typeArguments").BeginArray();
                foreach (Type a in t.IsGenericType ? t.GetGenericArguments() : Type.EmptyTypes)
                    w.Value(a.FullName);
                w.EndArray();
                w.EndObject();
            }
            w.EndArray();
            w.Prop("returnType", subject.ReturnType.FullName);
            w.EndObject();
            w.EndObject();
        }

        public bool OnCommand(string command) => false;
    }
}
