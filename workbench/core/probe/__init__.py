"""Looking inside a model: forward-hook activation statistics, gradient norms, health badges, the live callback."""
