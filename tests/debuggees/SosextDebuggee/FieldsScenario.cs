using System;
using System.Collections.Generic;
using System.Globalization;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `fields`: objects whose every field value is known, for dumpobj, dumparray, dumpvc, dumpmt,
    /// dumpclass, dumpmd, name2ee, token2ee and the module commands. Everything hangs off the static
    /// root <see cref="s_root"/>; the truth gives each object's address and MethodTable, each field's
    /// name, C# type, offset and value, type tokens and module paths, method tokens, MethodDescs and
    /// JIT state, and the static values.
    /// Offsets are from the object's address (its MethodTable pointer), as SOS prints them for
    /// instance fields; struct member offsets (dumpvc) are from the struct's first byte.
    /// </summary>
    internal sealed unsafe class FieldsScenario : IScenario
    {
        public const string AsciiText = "SOSEXT fields: hello, world";
        public const string NonAsciiText = "h\u00e9llo \u2713 \u65e5\u672c";

        private enum Slot
        {
            Holder, StrAscii, StrNonAscii, Ints, Strings, Pairs, Matrix, Jagged, Empty, Bytes, Chars,
            BoxedPair, BoxedInt, BoxedCold, Inner, Outer, GenericInt, GenericString, Count,
        }

        internal static object[] s_root;
        private static int* s_native;
        private static int s_ranResult;

        private static object Root(Slot s) => s_root[(int)s];

        public void Build(string[] args)
        {
            s_root = new object[(int)Slot.Count];
            s_native = (int*)NativeMemory.Alloc(16);
            *s_native = 0x1234;

            var holder = new FieldsHolder
            {
                SByteField = -100,
                ByteField = 200,
                ShortField = -30000,
                UShortField = 60000,
                IntField = -2000000000,
                UIntField = 4000000000,
                LongField = -9000000000000000000,
                ULongField = 18000000000000000000,
                NIntField = -2,
                NUIntField = 0xDEADBEEF,
                BoolField = true,
                CharField = 'Q',
                FloatField = 3.25f,
                DoubleField = -1234.5625,
                DecimalField = 12345.6789m,
                ColorField = FieldColor.Blue,
                SmallField = FieldSmall.High,
                PermsField = FieldPerms.Read | FieldPerms.Exec,
                PointerField = s_native,
                StringField = string.Concat("field-", "string"),
                ObjectField = new FieldsOuter { OuterValue = 5 },
                NullField = null,
                IntArrayField = new[] { 3, 1, 4, 1, 5 },
                PairField = new FieldPair { Id = 77, Leaf = new FieldLeaf { Number = 8, Label = string.Concat("leaf-", "label") }, Weight = 0.5 },
                DateField = new DateTime(2024, 2, 29, 13, 14, 15, DateTimeKind.Utc).AddTicks(1234567),
                GuidField = new Guid("0f8fad5b-d9cb-469f-a165-70867728950e"),
                SpanField = new TimeSpan(1, 2, 3, 4, 5),
                ListField = new List<string>(4) { "one", "two" },
            };
            s_root[(int)Slot.Holder] = holder;
            FieldsHolder.s_counter = 12345;
            FieldsHolder.s_name = string.Concat("static-", "name");
            FieldsHolder.s_pair = new FieldPair { Id = -5, Leaf = new FieldLeaf { Number = 6 }, Weight = 2.5 };
            FieldsHolder.t_perThread = 77;
            s_ranResult = holder.RanMethod(1);

            s_root[(int)Slot.StrAscii] = string.Concat("SOSEXT fields: ", "hello, world");
            s_root[(int)Slot.StrNonAscii] = string.Concat("h\u00e9llo ", "\u2713 \u65e5\u672c");
            var ints = new int[10];
            for (int i = 0; i < ints.Length; i++) ints[i] = i * i - 3;
            s_root[(int)Slot.Ints] = ints;
            s_root[(int)Slot.Strings] = new[] { string.Concat("al", "pha"), null, string.Concat("gam", "ma") };
            var pairs = new FieldPair[3];
            for (int i = 0; i < pairs.Length; i++)
                pairs[i] = new FieldPair { Id = 1000 + i, Leaf = new FieldLeaf { Number = -i, Label = null }, Weight = i * 1.5 };
            s_root[(int)Slot.Pairs] = pairs;
            var matrix = new int[2, 3];
            for (int i = 0; i < 2; i++) for (int j = 0; j < 3; j++) matrix[i, j] = 10 * i + j;
            s_root[(int)Slot.Matrix] = matrix;
            s_root[(int)Slot.Jagged] = new[] { new[] { 1, 2 }, null, new[] { 3, 4, 5 } };
            s_root[(int)Slot.Empty] = new int[0];
            s_root[(int)Slot.Bytes] = Encoding.ASCII.GetBytes("Bytes: SOS\n!");
            s_root[(int)Slot.Chars] = "chars here".ToCharArray();
            s_root[(int)Slot.BoxedPair] = (object)new FieldPair { Id = 4242, Leaf = new FieldLeaf { Number = 3, Label = string.Concat("boxed-", "leaf") }, Weight = -0.25 };
            s_root[(int)Slot.BoxedInt] = (object)314159;
            // Boxing a default value does not run ColdStatics' static constructor.
            s_root[(int)Slot.BoxedCold] = (object)default(ColdStatics);
            s_root[(int)Slot.Inner] = new FieldsOuter.Inner { InnerValue = 31, InnerName = string.Concat("inner-", "name") };
            s_root[(int)Slot.Outer] = holder.ObjectField;
            GenericStatics<int>.s_shared = 7;
            GenericStatics<string>.s_shared = string.Concat("generic-", "static");
            s_root[(int)Slot.GenericInt] = new GenericStatics<int> { Value = 11 };
            s_root[(int)Slot.GenericString] = new GenericStatics<string> { Value = string.Concat("generic-", "value") };
        }

        public void Settle(int attempt)
        {
            GC.Collect();
            GC.Collect();
            GC.WaitForPendingFinalizers();
        }

        public bool OnCommand(string command) => false;

        // -- truth -------------------------------------------------------------------------------

        /// <summary>A type's name as SOS prints it (MethodTable name): Outer+Inner, List`1[[System.String, System.Private.CoreLib]], System.Int32[,].</summary>
        internal static string SosName(Type t)
        {
            if (t.IsArray)
                return SosName(t.GetElementType()) + "[" + new string(',', t.GetArrayRank() - 1) + "]";
            if (t.IsGenericType)
            {
                var sb = new StringBuilder(t.GetGenericTypeDefinition().FullName).Append('[');
                Type[] args = t.GetGenericArguments();
                for (int i = 0; i < args.Length; i++)
                {
                    if (i > 0) sb.Append(',');
                    sb.Append('[').Append(SosName(args[i])).Append(", ").Append(args[i].Assembly.GetName().Name).Append(']');
                }
                return sb.Append(']').ToString();
            }
            return t.FullName;
        }

        private static string Hex(nint v) => Mem.Hex(v);
        private static string R(double d) => d.ToString("R", CultureInfo.InvariantCulture);

        public void WriteTruth(Json w)
        {
            var holder = (FieldsHolder)Root(Slot.Holder);
            w.Name("module").BeginObject()
             .Prop("path", typeof(FieldsHolder).Module.FullyQualifiedName)
             .Prop("fileName", typeof(FieldsHolder).Module.Name)
             .Prop("assemblyName", typeof(FieldsHolder).Assembly.GetName().Name)
             .Prop("mvid", typeof(FieldsHolder).Module.ModuleVersionId.ToString())
             .EndObject();

            w.Name("types").BeginObject();
            foreach (Type t in new[]
            {
                typeof(FieldsHolder), typeof(FieldPair), typeof(FieldLeaf), typeof(FieldColor), typeof(FieldSmall),
                typeof(FieldPerms), typeof(ColdStatics), typeof(FieldsOuter), typeof(FieldsOuter.Inner),
                typeof(GenericStatics<int>), typeof(GenericStatics<string>), typeof(List<string>),
                typeof(int[]), typeof(string[]), typeof(FieldPair[]), typeof(int[,]), typeof(int[][]), typeof(byte[]),
                typeof(char[]), typeof(string),
            })
                WriteType(w, t);
            w.EndObject();

            w.Name("holder").BeginObject();
            w.PropHex("address", Mem.Addr(holder));
            w.PropHex("mt", Mem.CheckedMethodTable(holder));
            w.Prop("size", Mem.UnalignedSizeOf(holder));
            w.Name("fields").BeginArray();
            WriteHolderFields(w, holder);
            w.EndArray();
            // Enum values as .NET names them (flags joined with ", ").
            w.Name("enumTexts").BeginObject()
             .Prop(nameof(holder.ColorField), holder.ColorField.ToString())
             .Prop(nameof(holder.SmallField), holder.SmallField.ToString())
             .Prop(nameof(holder.PermsField), holder.PermsField.ToString())
             .EndObject();
            w.EndObject();

            w.Name("pair").BeginObject();
            FieldPair p = holder.PairField;
            w.PropHex("address", Mem.Addr(holder) + (nint)Mem.FieldOffset(holder, ref holder.PairField));
            w.Prop("id", p.Id).Prop("weight", R(p.Weight)).Prop("leafNumber", p.Leaf.Number)
             .PropHex("leafLabel", Mem.Addr(p.Leaf.Label)).Prop("leafLabelValue", p.Leaf.Label);
            // Offsets inside the struct, from its first byte (dumpvc's offsets).
            w.Prop("offsetId", FieldOffsetInStruct(ref holder.PairField, ref holder.PairField.Id));
            w.Prop("offsetLeaf", FieldOffsetInStruct(ref holder.PairField, ref holder.PairField.Leaf));
            w.Prop("offsetWeight", FieldOffsetInStruct(ref holder.PairField, ref holder.PairField.Weight));
            w.Prop("leafOffsetNumber", FieldOffsetInStruct(ref holder.PairField.Leaf, ref holder.PairField.Leaf.Number));
            w.Prop("leafOffsetLabel", FieldOffsetInStruct(ref holder.PairField.Leaf, ref holder.PairField.Leaf.Label));
            w.EndObject();

            w.Name("objects").BeginObject();
            void Obj(string role, object o) { w.Name(role); Truth.WriteObject(w, o); }
            Obj("strAscii", Root(Slot.StrAscii));
            Obj("strNonAscii", Root(Slot.StrNonAscii));
            Obj("stringField", holder.StringField);
            Obj("ints", Root(Slot.Ints));
            Obj("strings", Root(Slot.Strings));
            Obj("pairs", Root(Slot.Pairs));
            Obj("matrix", Root(Slot.Matrix));
            Obj("jagged", Root(Slot.Jagged));
            Obj("empty", Root(Slot.Empty));
            Obj("bytes", Root(Slot.Bytes));
            Obj("chars", Root(Slot.Chars));
            Obj("boxedPair", Root(Slot.BoxedPair));
            Obj("boxedInt", Root(Slot.BoxedInt));
            Obj("boxedCold", Root(Slot.BoxedCold));
            Obj("inner", Root(Slot.Inner));
            Obj("outer", Root(Slot.Outer));
            Obj("genericInt", Root(Slot.GenericInt));
            Obj("genericString", Root(Slot.GenericString));
            Obj("list", holder.ListField);
            Obj("intArrayField", holder.IntArrayField);
            w.EndObject();

            WriteArrayContents(w);
            WriteStatics(w, holder);
            WriteMethods(w);
            w.Prop("ranResult", s_ranResult);
        }

        private static long FieldOffsetInStruct<TS, TF>(ref TS s, ref TF f) =>
            (long)Unsafe.ByteOffset(ref Unsafe.As<TS, byte>(ref s), ref Unsafe.As<TF, byte>(ref f));

        private static void WriteType(Json w, Type t)
        {
            nint mt = t.TypeHandle.Value;
            w.Name(SosName(t)).BeginObject();
            w.Prop("sosName", SosName(t));
            w.Prop("csName", t.ToString());
            w.PropHex("mt", mt);
            w.Prop("token", Mem.Hex(t.MetadataToken));
            w.Prop("module", t.Module.FullyQualifiedName);
            w.Prop("assembly", t.Assembly.GetName().Name);
            w.Prop("isValueType", t.IsValueType);
            w.Prop("baseSize", Mem.MtBaseSize(mt));
            w.Prop("componentSize", Mem.MtComponentSize(mt));
            w.EndObject();
        }

        private static void WriteHolderFields(Json w, FieldsHolder h)
        {
            void F<T>(string name, ref T field, string kind, Action<Json> value)
            {
                w.BeginObject().Prop("name", name).Prop("type", typeof(T).ToString()).Prop("kind", kind)
                 .Prop("offset", Mem.FieldOffset(h, ref field)).Name("value");
                value(w);
                w.EndObject();
            }
            F(nameof(h.SByteField), ref h.SByteField, "int", j => j.Value(h.SByteField));
            F(nameof(h.ByteField), ref h.ByteField, "int", j => j.Value(h.ByteField));
            F(nameof(h.ShortField), ref h.ShortField, "int", j => j.Value(h.ShortField));
            F(nameof(h.UShortField), ref h.UShortField, "int", j => j.Value(h.UShortField));
            F(nameof(h.IntField), ref h.IntField, "int", j => j.Value(h.IntField));
            F(nameof(h.UIntField), ref h.UIntField, "int", j => j.Value(h.UIntField));
            F(nameof(h.LongField), ref h.LongField, "int", j => j.Value(h.LongField));
            F(nameof(h.ULongField), ref h.ULongField, "int", j => j.Value(h.ULongField));
            F(nameof(h.NIntField), ref h.NIntField, "pointer", j => j.Value(Hex(h.NIntField)));
            F(nameof(h.NUIntField), ref h.NUIntField, "pointer", j => j.Value(Hex((nint)h.NUIntField)));
            F(nameof(h.BoolField), ref h.BoolField, "bool", j => j.Value(h.BoolField));
            F(nameof(h.CharField), ref h.CharField, "char", j => j.Value((long)h.CharField));
            F(nameof(h.FloatField), ref h.FloatField, "float", j => j.Value(R(h.FloatField)));
            F(nameof(h.DoubleField), ref h.DoubleField, "float", j => j.Value(R(h.DoubleField)));
            F(nameof(h.DecimalField), ref h.DecimalField, "decimal", j => j.Value(h.DecimalField.ToString(CultureInfo.InvariantCulture)));
            F(nameof(h.ColorField), ref h.ColorField, "enum", j => j.Value((long)h.ColorField));
            F(nameof(h.SmallField), ref h.SmallField, "enum", j => j.Value((long)h.SmallField));
            F(nameof(h.PermsField), ref h.PermsField, "enum", j => j.Value((long)h.PermsField));
            // A pointer type cannot be a generic argument: measure it through a pinned address.
            fixed (int** p = &h.PointerField)
            {
                long offset = (long)((byte*)p - (byte*)Mem.Addr(h));
                w.BeginObject().Prop("name", nameof(h.PointerField)).Prop("type", typeof(int*).ToString())
                 .Prop("kind", "pointer").Prop("offset", offset).Name("value").Value(Hex((nint)h.PointerField)).EndObject();
            }
            F(nameof(h.StringField), ref h.StringField, "ref", j => j.Value(Hex(Mem.Addr(h.StringField))));
            F(nameof(h.ObjectField), ref h.ObjectField, "ref", j => j.Value(Hex(Mem.Addr(h.ObjectField))));
            F(nameof(h.NullField), ref h.NullField, "ref", j => j.Value("0x0"));
            F(nameof(h.IntArrayField), ref h.IntArrayField, "ref", j => j.Value(Hex(Mem.Addr(h.IntArrayField))));
            F(nameof(h.PairField), ref h.PairField, "struct", j => j.Value(Hex(Mem.Addr(h) + (nint)Mem.FieldOffset(h, ref h.PairField))));
            F(nameof(h.DateField), ref h.DateField, "datetime", j => j.BeginObject()
                .Prop("text", h.DateField.ToString("o", CultureInfo.InvariantCulture)).Prop("ticks", h.DateField.Ticks)
                .Prop("kind", h.DateField.Kind.ToString()).EndObject());
            F(nameof(h.GuidField), ref h.GuidField, "guid", j => j.Value(h.GuidField.ToString("D")));
            F(nameof(h.SpanField), ref h.SpanField, "timespan", j => j.Value(h.SpanField.ToString("c", CultureInfo.InvariantCulture)));
            F(nameof(h.ListField), ref h.ListField, "ref", j => j.Value(Hex(Mem.Addr(h.ListField))));
        }

        private static void WriteArrayContents(Json w)
        {
            w.Name("arrays").BeginObject();
            w.Name("ints").BeginArray();
            foreach (int v in (int[])Root(Slot.Ints)) w.Value(v);
            w.EndArray();
            w.Name("strings").BeginArray();
            foreach (string s in (string[])Root(Slot.Strings)) w.Value(s == null ? "0x0" : Hex(Mem.Addr(s)));
            w.EndArray();
            w.Name("stringValues").BeginArray();
            foreach (string s in (string[])Root(Slot.Strings)) w.Value(s);
            w.EndArray();
            var pairs = (FieldPair[])Root(Slot.Pairs);
            w.Name("pairs").BeginArray();
            for (int i = 0; i < pairs.Length; i++)
                w.BeginObject().PropHex("address", Mem.Addr(pairs) + 16 + i * Unsafe.SizeOf<FieldPair>())
                 .Prop("id", pairs[i].Id).Prop("number", pairs[i].Leaf.Number).Prop("weight", R(pairs[i].Weight)).EndObject();
            w.EndArray();
            w.Prop("pairSize", Unsafe.SizeOf<FieldPair>());
            var matrix = (int[,])Root(Slot.Matrix);
            w.Name("matrix").BeginArray();
            for (int i = 0; i < 2; i++) for (int j = 0; j < 3; j++) w.Value(matrix[i, j]);
            w.EndArray();
            w.Name("jagged").BeginArray();
            foreach (int[] inner in (int[][])Root(Slot.Jagged)) w.Value(inner == null ? "0x0" : Hex(Mem.Addr(inner)));
            w.EndArray();
            w.Prop("bytesText", Encoding.ASCII.GetString((byte[])Root(Slot.Bytes)));
            w.Prop("charsText", new string((char[])Root(Slot.Chars)));
            w.EndObject();
        }

        private static void WriteStatics(Json w, FieldsHolder h)
        {
            w.Name("statics").BeginObject();
            w.Prop("s_counter", FieldsHolder.s_counter);
            w.PropHex("s_name", Mem.Addr(FieldsHolder.s_name));
            w.Prop("s_nameValue", FieldsHolder.s_name);
            w.Prop("s_pairId", FieldsHolder.s_pair.Id);
            w.Prop("s_pairWeight", R(FieldsHolder.s_pair.Weight));
            w.Prop("t_perThread", FieldsHolder.t_perThread);
            w.Prop("t_perThreadOsTid", Mem.CurrentOsTid());
            w.Prop("genericIntShared", GenericStatics<int>.s_shared);
            w.PropHex("genericStringShared", Mem.Addr(GenericStatics<string>.s_shared));
            w.Prop("coldInitializedValue", 42);
            w.EndObject();
        }

        private static void WriteMethods(Json w)
        {
            w.Name("methods").BeginObject();
            void M(string role, MethodInfo m, bool ran)
            {
                w.Name(role).BeginObject()
                 .Prop("name", m.Name)
                 .Prop("sosName", SosName(m.DeclaringType) + "." + m.Name + "(Int32)")
                 .Prop("token", Mem.Hex(m.MetadataToken))
                 .PropHex("methodDesc", m.MethodHandle.Value)
                 .Prop("ran", ran)
                 .EndObject();
            }
            M("ran", typeof(FieldsHolder).GetMethod(nameof(FieldsHolder.RanMethod)), true);
            M("never", typeof(FieldsHolder).GetMethod(nameof(FieldsHolder.NeverRanMethod)), false);
            w.EndObject();
        }
    }
}
