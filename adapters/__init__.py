"""LiveKit adapters: the only part of turnfsm that imports livekit."""
