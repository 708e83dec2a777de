int main() { return 2; }  // placeholder, replaced by the real daemon
