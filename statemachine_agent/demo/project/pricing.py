"""Prices of a shopping cart: subtotal, discount and total, in euros."""

from __future__ import annotations


def subtotal(prices: list[float], quantities: list[int]) -> float:
    """The sum of each price times its quantity."""
    return sum(price * qty for price, qty in zip(prices, quantities, strict=True))


def apply_discount(amount: float, percent: float) -> float:
    """``amount`` reduced by ``percent`` percent (10 means 10 %), rounded to cents."""
    if not 0 <= percent <= 100:
        raise ValueError(f"a discount is between 0 and 100 percent, not {percent}")
    return round(amount - amount * percent, 2)


def total(prices: list[float], quantities: list[int], discount_percent: float = 0) -> float:
    """What the customer pays: the subtotal with the discount applied."""
    return apply_discount(subtotal(prices, quantities), discount_percent)
