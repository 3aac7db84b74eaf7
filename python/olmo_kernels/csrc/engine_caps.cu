// engine_caps.cu: the engine's GPU capabilities and portable mode (src/device_caps.cu), compiled
// into the extension as they are: the attention entry points choose their tiles by device_caps().
#define OLMO_CUDA_ARCHS "90a"  // what setup.py builds for (its -gencode)
#include "device_caps.cu"
