// Cheap questions asked before choosing a backend; never throws.
import { CudaDevice } from './device.js';

/** Number of visible CUDA GPUs; 0 when the driver is missing or reports none. */
export function cudaDeviceCount(): number {
  try {
    return CudaDevice.count();
  } catch {
    return 0;
  }
}

/** Why there is no GPU, for skip messages: the loader's or driver's own words. */
export function cudaUnavailableReason(): string | undefined {
  try {
    return CudaDevice.count() > 0 ? undefined : 'the CUDA driver reports no GPU';
  } catch (err) {
    return (err as Error).message.split('\n')[0];
  }
}
