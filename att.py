import shmatari, numpy as np
a = shmatari.attach("c5demo"); a.reset()
try: b = shmatari.attach("c5demo", timeout=2); print("second attach accepted?!")
except Exception as e: print("second attach:", type(e).__name__, getattr(e, "code", None), str(e)[:150])
print("first still works:", a.step(np.zeros(4, int))[1])
a.close()
c = shmatari.attach("c5demo", timeout=5); c.reset(); print("re-attach after close: ok"); c.close()
