"""The isolated machine an agent acts on: the bubblewrap sandbox and its files, cgroup limits, the
Xvfb desktop, the persistent terminal and the apps (Tk, LibreOffice, GIMP, Chromium)."""
