"""User content on its own origin (DESIGN.md rule 17): every notebook and every app is served
on a subdomain of USER_CONTENT_DOMAIN of its own (`nb-<id>.<domain>`, `app-<id>.<domain>`),
never on the panel's host, so the panel's cookies never reach a user's server and a user's
page never runs on the panel's origin.

A browser gets there through a one-time ticket (`tickets.py`): Open on the panel issues it,
the content host's `/_ajuste/ticket` redeems it and sets that host's own cookie. Every request
to the host is then checked by one rule (`gate.py`), answered for the gateway's `auth_request`
on a cluster (`views.gateway_auth`) and by the panel's own proxy under `make run`
(`middleware.py`, `proxy.py`, `tunnel.py` for websockets). Each kind that serves user content
says how in `<its package>/usercontent.py` (`served.py`)."""
