// Prints what System.Reflection.Metadata sees in an assembly, as JSON, so the Python
// metadata reader can be checked against an independent implementation.
//
// usage: MetadataOracle <assembly.dll> <out.json>
//
// Type names follow the conventions of sosext.clr.metadata.format_type_sig:
// "Ns.Outer+Inner", primitives "System.Int32", "T[]", "T[,]", "T[*]", "T*", "T&",
// "G`1<A, B>", "!0" / "!!0", "method R *(A, B)", "modreq(M) T", locals "T pinned".
using System;
using System.Collections.Immutable;
using System.IO;
using System.Linq;
using System.Reflection.Metadata;
using System.Reflection.Metadata.Ecma335;
using System.Reflection.PortableExecutable;
using System.Text;
using System.Text.Json;

namespace Sosext.Oracle
{
    sealed class Namer : ISignatureTypeProvider<string, object>
    {
        readonly MetadataReader md;
        public Namer(MetadataReader md) { this.md = md; }

        public string Def(TypeDefinitionHandle h)
        {
            var td = md.GetTypeDefinition(h);
            string name = md.GetString(td.Name);
            var outer = td.GetDeclaringType();
            if (!outer.IsNil) return Def(outer) + "+" + name;
            string ns = md.GetString(td.Namespace);
            return ns.Length > 0 ? ns + "." + name : name;
        }

        public string Ref(TypeReferenceHandle h)
        {
            var tr = md.GetTypeReference(h);
            string name = md.GetString(tr.Name);
            if (tr.ResolutionScope.Kind == HandleKind.TypeReference)
                return Ref((TypeReferenceHandle)tr.ResolutionScope) + "+" + name;
            string ns = md.GetString(tr.Namespace);
            return ns.Length > 0 ? ns + "." + name : name;
        }

        public string Exported(ExportedTypeHandle h)
        {
            var et = md.GetExportedType(h);
            string name = md.GetString(et.Name);
            if (et.Implementation.Kind == HandleKind.ExportedType)
                return Exported((ExportedTypeHandle)et.Implementation) + "+" + name;
            string ns = md.GetString(et.Namespace);
            return ns.Length > 0 ? ns + "." + name : name;
        }

        public string Any(EntityHandle h) => h.Kind switch
        {
            HandleKind.TypeDefinition => Def((TypeDefinitionHandle)h),
            HandleKind.TypeReference => Ref((TypeReferenceHandle)h),
            HandleKind.TypeSpecification => md.GetTypeSpecification((TypeSpecificationHandle)h).DecodeSignature(this, null),
            _ => "?",
        };

        public string GetPrimitiveType(PrimitiveTypeCode code) => "System." + code;
        public string GetTypeFromDefinition(MetadataReader r, TypeDefinitionHandle h, byte kind) => Def(h);
        public string GetTypeFromReference(MetadataReader r, TypeReferenceHandle h, byte kind) => Ref(h);
        public string GetTypeFromSpecification(MetadataReader r, object ctx, TypeSpecificationHandle h, byte kind) =>
            r.GetTypeSpecification(h).DecodeSignature(this, ctx);
        public string GetSZArrayType(string e) => e + "[]";
        public string GetArrayType(string e, ArrayShape shape) =>
            e + (shape.Rank == 1 ? "[*]" : "[" + new string(',', shape.Rank - 1) + "]");
        public string GetPointerType(string e) => e + "*";
        public string GetByReferenceType(string e) => e + "&";
        public string GetPinnedType(string e) => e + " pinned";
        public string GetGenericInstantiation(string g, ImmutableArray<string> args) => g + "<" + string.Join(", ", args) + ">";
        public string GetGenericTypeParameter(object ctx, int i) => "!" + i;
        public string GetGenericMethodParameter(object ctx, int i) => "!!" + i;
        public string GetModifiedType(string modifier, string unmodified, bool required) =>
            (required ? "modreq(" : "modopt(") + modifier + ") " + unmodified;
        public string GetFunctionPointerType(MethodSignature<string> s) =>
            "method " + s.ReturnType + " *(" + string.Join(", ", s.ParameterTypes) + ")";
    }

    static class Program
    {
        static int Tok(EntityHandle h) => h.IsNil ? 0 : MetadataTokens.GetToken(h);

        static void Version(Utf8JsonWriter w, Version v)
        {
            w.WriteStartArray("version");
            w.WriteNumberValue(v.Major); w.WriteNumberValue(v.Minor);
            w.WriteNumberValue(v.Build); w.WriteNumberValue(v.Revision);
            w.WriteEndArray();
        }

        static void Strings(Utf8JsonWriter w, string name, System.Collections.Generic.IEnumerable<string> items)
        {
            w.WriteStartArray(name);
            foreach (var s in items) w.WriteStringValue(s);
            w.WriteEndArray();
        }

        static void MethodSig(Utf8JsonWriter w, MethodSignature<string> s)
        {
            w.WriteNumber("conv", s.Header.RawValue);
            w.WriteNumber("generic_count", s.GenericParameterCount);
            w.WriteNumber("required_count", s.RequiredParameterCount);
            w.WriteString("ret", s.ReturnType);
            Strings(w, "params", s.ParameterTypes);
        }

        static unsafe int Main(string[] args)
        {
            byte[] bytes = File.ReadAllBytes(args[0]);
            using var output = File.Create(args[1]);
            using var w = new Utf8JsonWriter(output, new JsonWriterOptions { Indented = false });
            w.WriteStartObject();
            if (bytes.Length >= 4 && BitConverter.ToUInt32(bytes, 0) == 0x424A5342)
            {
                // A bare metadata blob (the tests rewrite metadata in other layouts).
                fixed (byte* p = bytes)
                {
                    Dump(new MetadataReader(p, bytes.Length), w);
                }
            }
            else
            {
                using var pe = new PEReader(new MemoryStream(bytes));
                w.WriteNumber("metadata_rva", pe.PEHeaders.CorHeader.MetadataDirectory.RelativeVirtualAddress);
                w.WriteNumber("metadata_size", pe.GetMetadata().Length);
                Dump(pe.GetMetadataReader(), w);
            }
            w.WriteEndObject();
            return 0;
        }

        static void Dump(MetadataReader md, Utf8JsonWriter w)
        {
            var namer = new Namer(md);
            w.WriteString("version", md.MetadataVersion);

            w.WriteStartObject("tables");
            foreach (TableIndex t in Enum.GetValues(typeof(TableIndex)))
            {
                if ((int)t > 0x2C) continue;
                w.WriteStartArray(((int)t).ToString());
                w.WriteNumberValue(md.GetTableRowCount(t));
                w.WriteNumberValue(md.GetTableRowSize(t));
                w.WriteNumberValue(md.GetTableMetadataOffset(t));
                w.WriteEndArray();
            }
            w.WriteEndObject();

            var module = md.GetModuleDefinition();
            w.WriteString("module_name", md.GetString(module.Name));
            w.WriteString("mvid", md.GetGuid(module.Mvid).ToString());

            if (md.IsAssembly)
            {
                var a = md.GetAssemblyDefinition();
                w.WriteStartObject("assembly");
                w.WriteString("name", md.GetString(a.Name));
                Version(w, a.Version);
                w.WriteString("culture", md.GetString(a.Culture));
                w.WriteNumber("flags", (int)a.Flags);
                w.WriteEndObject();
            }
            else w.WriteNull("assembly");

            w.WriteStartArray("assembly_refs");
            foreach (var h in md.AssemblyReferences)
            {
                var r = md.GetAssemblyReference(h);
                w.WriteStartObject();
                w.WriteNumber("token", Tok(h));
                w.WriteString("name", md.GetString(r.Name));
                Version(w, r.Version);
                w.WriteString("culture", md.GetString(r.Culture));
                w.WriteEndObject();
            }
            w.WriteEndArray();

            w.WriteStartArray("type_defs");
            foreach (var h in md.TypeDefinitions)
            {
                var td = md.GetTypeDefinition(h);
                w.WriteStartObject();
                w.WriteNumber("token", Tok(h));
                w.WriteString("namespace", md.GetString(td.Namespace));
                w.WriteString("name", md.GetString(td.Name));
                w.WriteString("full_name", namer.Def(h));
                w.WriteNumber("flags", (int)td.Attributes);
                w.WriteNumber("extends", Tok(td.BaseType));
                w.WriteNumber("enclosing", Tok(td.GetDeclaringType()));
                Strings(w, "generic_params", td.GetGenericParameters().Select(g => md.GetString(md.GetGenericParameter(g).Name)));

                w.WriteStartArray("fields");
                foreach (var fh in td.GetFields())
                {
                    var f = md.GetFieldDefinition(fh);
                    w.WriteStartObject();
                    w.WriteNumber("token", Tok(fh));
                    w.WriteString("name", md.GetString(f.Name));
                    w.WriteNumber("flags", (int)f.Attributes);
                    w.WriteString("sig", f.DecodeSignature(namer, null));
                    w.WriteEndObject();
                }
                w.WriteEndArray();

                w.WriteStartArray("methods");
                foreach (var mh in td.GetMethods())
                {
                    var m = md.GetMethodDefinition(mh);
                    var sig = m.DecodeSignature(namer, null);
                    w.WriteStartObject();
                    w.WriteNumber("token", Tok(mh));
                    w.WriteString("name", md.GetString(m.Name));
                    w.WriteNumber("flags", (int)m.Attributes);
                    w.WriteNumber("impl_flags", (int)m.ImplAttributes);
                    w.WriteNumber("rva", m.RelativeVirtualAddress);
                    w.WriteNumber("param_count", sig.ParameterTypes.Length);
                    MethodSig(w, sig);
                    var names = new string[sig.ParameterTypes.Length];
                    for (int i = 0; i < names.Length; i++) names[i] = "";
                    foreach (var ph in m.GetParameters())
                    {
                        var p = md.GetParameter(ph);
                        if (p.SequenceNumber > 0 && p.SequenceNumber <= names.Length)
                            names[p.SequenceNumber - 1] = md.GetString(p.Name);
                    }
                    Strings(w, "param_names", names);
                    Strings(w, "generic_params", m.GetGenericParameters().Select(g => md.GetString(md.GetGenericParameter(g).Name)));
                    w.WriteEndObject();
                }
                w.WriteEndArray();
                w.WriteEndObject();
            }
            w.WriteEndArray();

            w.WriteStartArray("type_refs");
            foreach (var h in md.TypeReferences)
            {
                var tr = md.GetTypeReference(h);
                w.WriteStartObject();
                w.WriteNumber("token", Tok(h));
                w.WriteString("full_name", namer.Ref(h));
                w.WriteNumber("scope", Tok(tr.ResolutionScope));
                w.WriteEndObject();
            }
            w.WriteEndArray();

            w.WriteStartArray("type_specs");
            for (int i = 1; i <= md.GetTableRowCount(TableIndex.TypeSpec); i++)
            {
                var h = MetadataTokens.TypeSpecificationHandle(i);
                w.WriteStartObject();
                w.WriteNumber("token", Tok(h));
                w.WriteString("text", md.GetTypeSpecification(h).DecodeSignature(namer, null));
                w.WriteEndObject();
            }
            w.WriteEndArray();

            w.WriteStartArray("member_refs");
            foreach (var h in md.MemberReferences)
            {
                var r = md.GetMemberReference(h);
                w.WriteStartObject();
                w.WriteNumber("token", Tok(h));
                w.WriteString("name", md.GetString(r.Name));
                w.WriteNumber("parent", Tok(r.Parent));
                if (r.GetKind() == MemberReferenceKind.Field)
                    w.WriteString("field", r.DecodeFieldSignature(namer, null));
                else
                    MethodSig(w, r.DecodeMethodSignature(namer, null));
                w.WriteEndObject();
            }
            w.WriteEndArray();

            w.WriteStartArray("method_specs");
            for (int i = 1; i <= md.GetTableRowCount(TableIndex.MethodSpec); i++)
            {
                var h = MetadataTokens.MethodSpecificationHandle(i);
                var s = md.GetMethodSpecification(h);
                w.WriteStartObject();
                w.WriteNumber("token", Tok(h));
                w.WriteNumber("method", Tok(s.Method));
                Strings(w, "args", s.DecodeSignature(namer, null));
                w.WriteEndObject();
            }
            w.WriteEndArray();

            w.WriteStartArray("stand_alone_sigs");
            for (int i = 1; i <= md.GetTableRowCount(TableIndex.StandAloneSig); i++)
            {
                var h = MetadataTokens.StandaloneSignatureHandle(i);
                var s = md.GetStandaloneSignature(h);
                w.WriteStartObject();
                w.WriteNumber("token", Tok(h));
                if (s.GetKind() == StandaloneSignatureKind.LocalVariables)
                    Strings(w, "locals", s.DecodeLocalSignature(namer, null));
                else
                    MethodSig(w, s.DecodeMethodSignature(namer, null));
                w.WriteEndObject();
            }
            w.WriteEndArray();

            w.WriteStartArray("exported_types");
            foreach (var h in md.ExportedTypes)
            {
                var e = md.GetExportedType(h);
                w.WriteStartObject();
                w.WriteNumber("token", Tok(h));
                w.WriteString("full_name", namer.Exported(h));
                w.WriteNumber("flags", (int)e.Attributes);
                w.WriteNumber("implementation", Tok(e.Implementation));
                w.WriteEndObject();
            }
            w.WriteEndArray();

            w.WriteStartArray("user_strings");
            var us = MetadataTokens.UserStringHandle(0);
            while (true)
            {
                us = md.GetNextHandle(us);
                if (us.IsNil) break;
                w.WriteStartObject();
                w.WriteNumber("token", MetadataTokens.GetToken(us));
                // Base64 of UTF-16: JSON cannot carry a lone surrogate faithfully.
                w.WriteString("utf16", Convert.ToBase64String(Encoding.Unicode.GetBytes(md.GetUserString(us))));
                w.WriteEndObject();
            }
            w.WriteEndArray();
        }
    }
}
