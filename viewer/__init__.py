"""The attention viewer: caption a photo word by word and show where the model looked."""
