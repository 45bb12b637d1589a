"""The ground every app stands on, importing none of them (DESIGN section 2).

Environment helpers and secret files (`env`), the canonical JSON that digests and MACs are computed over
(`canonical`), the failures every layer must name (`errors`), messages to open streams and console pages
(`live`) and the mechanics every event stream shares (`streams`), what every REST API shares (`rest`), the
console's shared pieces (`console`), bearer token values (`tokens`) and the executor's capability protocol
(`capabilities`). Any app may import it; it imports only Django and the libraries, so it can never close a
cycle between apps.
"""
