"""Backend implementations. Import them from ember.backend."""
