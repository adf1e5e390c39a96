"""What engine calls cost: price rows per model, and bills from usage.

It imports neither the engines nor their libraries, so ``roster check``
can name the models without a price; genai-prices loads on the first
priced lookup.
"""

from ._prices import Pricing, bill, price_for

__all__ = ("Pricing", "bill", "price_for")
