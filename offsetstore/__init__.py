"""offsetstore: consumer offsets (LocalFileOffsetStore, RemoteBrokerOffsetStore, the broker's
offset table). Built in a later issue; the package exists so the distribution's layout is fixed."""
