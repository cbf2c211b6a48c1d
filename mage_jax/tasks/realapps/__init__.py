"""Real-application tasks (LibreOffice Calc/Writer/Impress, GIMP, and tasks across two apps)."""
