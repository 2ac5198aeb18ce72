"""What runs on a workstation or in tests: the CLI, the demo, the function as a process and the API emulator."""
