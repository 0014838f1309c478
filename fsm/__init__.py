"""turnfsm: explicit, checked, drawable turn-taking for LiveKit Agents voice agents."""
