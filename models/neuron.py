"""Front door: `models.neuron` is models.lessons.neuron (see models/doors.py)."""
from models.doors import front_door
front_door(__name__, "models.lessons.neuron")
