"""ReplayProbe: real captures (nvidia-smi, NVLink, kernel logs) read back as snapshot values."""
