"""Live pages pushed, not polled (issue 27): what is stored is published to Redis after its
transaction commits (channels.py), and Server-Sent Events streams served by the ASGI server
(asgi.py, feed.py) carry it to every viewer. One Redis subscription per web process fans out
to every open stream (hub.py), so an idle stream costs no query, no thread and no Redis
connection of its own."""
