"""HTTP requests on the heap: the client's (System.Net.Http) and ASP.NET Core's incoming ones.

Client side: an HttpRequestMessage holds its method (``_method``, an HttpMethod whose
``_method`` is the text) and its URI (``_requestUri``, a Uri whose ``_string`` is the text it
was made from). It never points to its response; an HttpResponseMessage points to its request
(``_requestMessage``) and holds ``_statusCode``. So, as SOS's dumphttp does, every request is
found both ways and a request with a response wins over the same request seen alone: those
with a status code come first, each group in heap order. A request without a response is
pending. Older runtimes spelt the fields without the underscore.

Server side: an ASP.NET Core request in flight is a DefaultHttpContext whose ``_features``
(a FeatureReferences struct) holds the server's feature collection; Kestrel's (HttpProtocol)
keeps the request line in ``<Scheme>k__BackingField``, ``<Path>k__BackingField``,
``<QueryString>k__BackingField`` and the method as an enum (``<Method>k__BackingField``),
whose text ``_methodText`` is made only once someone asked for it; SOS then prints no method,
sosext names the enum's member (GET, PUT …) as the text would be.
A finished context drops its collection, so only requests in flight are listed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..typesystem.enums import enum_info
from ..heap.instances import MissingField, ObjectReader, objects_of_types

if TYPE_CHECKING:
    from ..runtime import ClrRuntime

REQUEST_MESSAGE = "System.Net.Http.HttpRequestMessage"
RESPONSE_MESSAGE = "System.Net.Http.HttpResponseMessage"
HTTP_CONTEXT = "Microsoft.AspNetCore.Http.DefaultHttpContext"
STRING = "System.String"


@dataclass(frozen=True, slots=True)
class HttpRequest:
    address: int  # the HttpRequestMessage
    method_table: int
    method: str
    uri: str
    status_code: int | None  # None while no response has come

    @property
    def host(self) -> str:
        return uri_host(self.uri)


@dataclass(frozen=True, slots=True)
class IncomingRequest:
    address: int  # the DefaultHttpContext
    method: str
    scheme: str
    url: str  # path and query string
    # The method is the one Kestrel parsed (its HttpMethod enum): nothing asked for its text yet
    # (_methodText is null), so SOS, which reads only a string there, shows none.
    method_parsed: bool = False
    collection: int = 0  # the request's feature collection (Kestrel's HttpProtocol)


def uri_host(uri: str) -> str:
    """The host part of an absolute URI, as System.Uri.Host gives it (IPv6 in brackets)."""
    rest = uri.split("://", 1)[1] if "://" in uri else uri
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].rsplit("@", 1)[-1]
    if authority.startswith("["):
        return authority[:authority.find("]") + 1] if "]" in authority else authority
    return authority.split(":", 1)[0].lower()


class _Fields:
    """Reads by the first of several spellings a field has had across runtime versions."""

    def __init__(self, runtime: "ClrRuntime") -> None:
        self.reader = ObjectReader(runtime)

    def read_any(self, obj: int, names: tuple[str, ...], what: str) -> int:
        r = self.reader
        mt = r.method_table(obj)
        for name in names:
            if r.field(mt, name) is not None:
                return r.read(obj, name, mt)
        raise MissingField(f"Unable to read {what}: type '{r.heap.types.name_of(mt)}' has no field named "
                           + " or ".join(names))

    def object_any(self, obj: int, names: tuple[str, ...], what: str) -> int:
        """A reference field's target, 0 when null or not an object on the heap."""
        value = self.read_any(obj, names, what)
        return value if value and self.reader.is_object(value) else 0

    def string_at(self, obj: int) -> str | None:
        if not obj or not self.reader.is_object(obj) or self.reader.type_name(obj) != STRING:
            return None
        return self.reader.string(obj)


def http_requests(runtime: "ClrRuntime") -> list[HttpRequest]:
    """Every client request on the heap, as SOS's dumphttp lists them (see the module)."""
    f = _Fields(runtime)
    found: list[HttpRequest] = []
    for address, name in objects_of_types(runtime.heap, (REQUEST_MESSAGE, RESPONSE_MESSAGE)):
        if name == REQUEST_MESSAGE:
            found.append(_request(f, address, None))
            continue
        request = f.object_any(address, ("_requestMessage", "requestMessage"), "HttpResponseMessage's request")
        if request:
            status = f.read_any(address, ("_statusCode", "statusCode"), "status code")
            found.append(_request(f, request, status & 0xFFFFFFFF))
    found.sort(key=lambda r: r.status_code is None)  # stable: heap order within each group
    seen: set[int] = set()
    unique = []
    for r in found:
        if r.address not in seen:
            seen.add(r.address)
            unique.append(r)
    return unique


def _request(f: _Fields, request: int, status: int | None) -> HttpRequest:
    method = f.object_any(request, ("_method", "method"), "HTTP Method")
    text = f.string_at(f.object_any(method, ("_method", "method"), "Method")) if method else None
    uri = f.object_any(request, ("_requestUri", "requestUri"), "request uri")
    uri_text = f.string_at(f.object_any(uri, ("_string", "m_String"), "uri string")) if uri else None
    return HttpRequest(request, f.reader.method_table(request), text or "", uri_text or "", status)


def incoming_requests(runtime: "ClrRuntime") -> list[IncomingRequest]:
    """ASP.NET Core requests in flight (DefaultHttpContexts with a feature collection), in heap order."""
    f = _Fields(runtime)
    r = f.reader
    out: list[IncomingRequest] = []
    for context, _ in objects_of_types(runtime.heap, (HTTP_CONTEXT,)):
        features = r.field(r.method_table(context), "_features")
        if features is None or not features.type_mt:
            raise MissingField(f"{HTTP_CONTEXT} has no _features: this ASP.NET Core version's layout is not supported")
        collection = r.read(features.address_in(context), "<Collection>k__BackingField", features.type_mt,
                            value_class=True)
        if not collection or not r.is_object(collection):
            continue
        cmt = r.method_table(collection)

        def text(name: str) -> str:
            return (f.string_at(r.read(collection, name, cmt)) or "") if r.field(cmt, name) is not None else ""

        method = f.string_at(r.read(collection, "<Method>k__BackingField", cmt)) \
            if _is_reference(r, cmt, "<Method>k__BackingField") else None
        parsed = False
        if method is None:
            method = text("_methodText")
            if not method:
                method = _known_method(runtime, r, collection, cmt)
                parsed = bool(method)
        out.append(IncomingRequest(context, method,
                                   text("<Scheme>k__BackingField"),
                                   text("<Path>k__BackingField") + text("<QueryString>k__BackingField"),
                                   parsed, collection))
    return out


def _known_method(runtime: "ClrRuntime", r: ObjectReader, obj: int, mt: int) -> str:
    """Kestrel's parsed method (its HttpMethod enum: Get, Put …) in upper case, for a request
    whose method text nobody asked for yet; "" for a custom method or none."""
    name = "<Method>k__BackingField"
    field = r.field(mt, name)
    if field is None or field.is_reference or not field.type_mt:
        return ""
    info = enum_info(runtime, field.type_mt)
    text = info.text(r.read(obj, name, mt)) if info is not None else None
    return text.upper() if text and text not in ("Custom", "None") else ""


def _is_reference(r: ObjectReader, mt: int, name: str) -> bool:
    field = r.field(mt, name)
    return field is not None and field.is_reference
