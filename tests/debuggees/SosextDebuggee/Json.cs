using System;
using System.Collections.Generic;
using System.Globalization;
using System.Text;

namespace DebuggeeHost
{
    /// <summary>A small compact JSON writer. Hand-written so that the output is one line, non-ASCII is
    /// always \u-escaped, and numbers are invariant, whatever the console encoding or culture.</summary>
    internal sealed class Json
    {
        private readonly StringBuilder _sb;
        // One entry per open container: true until its first member is written.
        private readonly List<bool> _first = new List<bool>();
        private bool _afterName;

        public Json(int capacity = 1 << 16) { _sb = new StringBuilder(capacity); }

        public override string ToString() => _sb.ToString();

        private void Separate()
        {
            if (_afterName) { _afterName = false; return; }
            int top = _first.Count - 1;
            if (top < 0) return;
            if (_first[top]) _first[top] = false;
            else _sb.Append(',');
        }

        public Json BeginObject() { Separate(); _sb.Append('{'); _first.Add(true); return this; }
        public Json EndObject() { _first.RemoveAt(_first.Count - 1); _sb.Append('}'); return this; }
        public Json BeginArray() { Separate(); _sb.Append('['); _first.Add(true); return this; }
        public Json EndArray() { _first.RemoveAt(_first.Count - 1); _sb.Append(']'); return this; }

        public Json Name(string name)
        {
            Separate();
            AppendString(name);
            _sb.Append(':');
            _afterName = true;
            return this;
        }

        public Json Null() { Separate(); _sb.Append("null"); return this; }
        public Json Value(bool v) { Separate(); _sb.Append(v ? "true" : "false"); return this; }
        public Json Value(long v) { Separate(); _sb.Append(v.ToString(CultureInfo.InvariantCulture)); return this; }
        public Json Value(ulong v) { Separate(); _sb.Append(v.ToString(CultureInfo.InvariantCulture)); return this; }
        public Json Value(double v) { Separate(); _sb.Append(v.ToString("R", CultureInfo.InvariantCulture)); return this; }
        public Json Value(string v) { Separate(); if (v == null) _sb.Append("null"); else AppendString(v); return this; }
        public Json Hex(nint v) => Value(Mem.Hex(v));

        public Json Prop(string name, bool v) => Name(name).Value(v);
        public Json Prop(string name, long v) => Name(name).Value(v);
        public Json Prop(string name, double v) => Name(name).Value(v);
        public Json Prop(string name, string v) => Name(name).Value(v);
        public Json PropHex(string name, nint v) => Name(name).Hex(v);

        /// <summary>Writes a value of a few well-known boxed types (GC configuration values, field values).</summary>
        public Json Any(object v)
        {
            switch (v)
            {
                case null: return Null();
                case bool b: return Value(b);
                case string s: return Value(s);
                case char c: return Value(c.ToString());
                case byte or sbyte or short or ushort or int or long:
                    return Value(Convert.ToInt64(v, CultureInfo.InvariantCulture));
                case uint or ulong: return Value(Convert.ToUInt64(v, CultureInfo.InvariantCulture));
                case float f: return Value((double)f);
                case double d: return Value(d);
                default: return Value(Convert.ToString(v, CultureInfo.InvariantCulture));
            }
        }

        private void AppendString(string s)
        {
            _sb.Append('"');
            foreach (char c in s)
            {
                switch (c)
                {
                    case '"': _sb.Append("\\\""); break;
                    case '\\': _sb.Append("\\\\"); break;
                    case '\n': _sb.Append("\\n"); break;
                    case '\r': _sb.Append("\\r"); break;
                    case '\t': _sb.Append("\\t"); break;
                    default:
                        if (c < 0x20 || c > 0x7E)
                            _sb.Append("\\u").Append(((int)c).ToString("x4", CultureInfo.InvariantCulture));
                        else
                            _sb.Append(c);
                        break;
                }
            }
            _sb.Append('"');
        }
    }
}
