"""Serving: openpi's wire, the client (RemoteModel), the batching server and `policybench serve`."""
